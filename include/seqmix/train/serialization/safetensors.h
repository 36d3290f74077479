#pragma once
/// @file safetensors.h
/// The safetensors format (the `model.safetensors` of a Hugging Face model folder), read and
/// written in plain C++ without LibTorch: `seqmix export --format hf` writes it and
/// `seqmix import` reads it (export.h). Python's `safetensors.torch.load_file` /
/// `save_file` read and write the same files.
///
/// **Layout.** A file is three parts, one after the other:
///   1. N, the length of the header in bytes: 8 bytes, an unsigned little-endian integer;
///   2. the header: N bytes of UTF-8 JSON, one object, padded at its end with spaces (seqmix
///      pads it to a multiple of 8 bytes, so that the buffer starts aligned):
///        {"<tensor name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
///         "__metadata__": {"format": "pt"}}
///      "__metadata__" is optional and maps strings to strings; PyTorch's writers put
///      {"format": "pt"} there, and transformers refuses a file without it;
///   3. the buffer: each tensor's elements, C-contiguous and little-endian, at bytes
///      [begin, end) of the buffer (`data_offsets`, counted from the buffer's first byte).
///      The ranges follow each other without gaps or overlaps and cover the buffer exactly.
/// dtypes and their element sizes: BOOL, U8, I8, F8_E4M3, F8_E5M2 (1 byte); U16, I16, F16,
/// BF16 (2); U32, I32, F32 (4); U64, I64, F64 (8). A shape of [] is a scalar (one element).
///
/// Example:
///   const auto file = train::read_safetensors("hf/model.safetensors");
///   for (const auto& t : file.tensors) std::cout << t.name << " " << t.dtype << "\n";
///   const char* bytes = file.data(file.tensors[0]);   // t.end - t.begin bytes
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace seqmix::train {

/// One tensor of a safetensors file as its header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;           ///< "F32", "I64", ... (one of the dtypes above)
  std::vector<int64_t> shape;  ///< every size >= 0; [] for a scalar
  uint64_t begin = 0;          ///< its bytes: [begin, end) of the buffer
  uint64_t end = 0;
};

/// A safetensors file read whole and checked (read_safetensors).
struct SafetensorsFile {
  std::string bytes;                            ///< the whole file
  uint64_t buffer_start = 0;                    ///< 8 + N: where the buffer starts in `bytes`
  std::vector<SafetensorsEntry> tensors;        ///< in buffer order (ascending `begin`)
  std::map<std::string, std::string> metadata;  ///< "__metadata__" ({} when absent)

  /// The first byte of `t`'s elements (end - begin bytes of them).
  const char* data(const SafetensorsEntry& t) const {
    return bytes.data() + buffer_start + t.begin;
  }
};

/// A tensor to write: `nbytes` bytes at `data`, C-contiguous and little-endian.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;  ///< one of the dtypes above
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t nbytes = 0;  ///< must be the element size times the product of `shape`
};

/// The size in bytes of one element of `dtype` ("F32": 4); 0 for a name that is not one of
/// the dtypes above.
int64_t safetensors_dtype_size(const std::string& dtype);

/// The largest header seqmix reads (100 MB, the limit of the safetensors library): a file
/// claiming more is refused before anything is allocated for it.
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

/// Checks `bytes`, the whole content of the safetensors file `path` (named in errors only),
/// and returns it with its tensors. Nothing past the file is ever read and nothing crafted
/// makes it crash: every fault below is an error.
/// @throws std::runtime_error "safetensors file '<path>' is corrupt: <why>" or, for one
///         tensor's entry, "safetensors file '<path>': tensor '<name>' <why>", when
///         - the file is shorter than 8 bytes, or N exceeds kSafetensorsMaxHeader or the
///           bytes after them ("its header claims 9000 bytes, the file holds 130 after the
///           header's length (truncated?)");
///         - the header is not a JSON object (the JSON parser's message), holds a name twice,
///           or "__metadata__" is not an object of strings;
///         - an entry is not an object of exactly "dtype", "shape" and "data_offsets"; its
///           dtype is not one above ("has dtype 'F33'; ..."); a size is negative or not an
///           integer; its element count times the element size overflows or differs from
///           end - begin ("has shape [2, 3] and dtype F32 (24 bytes) but data_offsets [0, 20]
///           (20 bytes)");
///         - the offsets are not two integers with begin <= end, lie outside the buffer, or
///           overlap, leave a gap or leave bytes at the end ("tensor 'b' starts at byte 16 of
///           the buffer, where tensor 'a' ends at byte 24").
SafetensorsFile parse_safetensors(std::string bytes, const std::string& path);

/// Reads `path` whole and parses it (parse_safetensors).
/// @throws std::runtime_error "safetensors file '<path>' does not exist" (or is not a regular
///         file, or cannot be read), and as parse_safetensors.
SafetensorsFile read_safetensors(const std::string& path);

/// The bytes of a safetensors file holding `tensors` and `metadata` (written into
/// "__metadata__" unless empty). The buffer holds the tensors by decreasing element size
/// (in the order given within one size), so that every tensor starts at a multiple of its
/// element size from an 8-aligned buffer start: readers that view the buffer in place
/// (safetensors.torch) need that. The header is padded with spaces to a multiple of 8.
/// @throws std::invalid_argument naming the tensor: an empty name, "__metadata__" or a name
///         given twice, an unknown dtype, a negative size, `nbytes` that is not what the
///         dtype and shape take, or no data for a non-empty tensor.
std::string safetensors_bytes(const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace seqmix::train
