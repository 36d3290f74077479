#pragma once
// Internal to src/train/: the checks a LibTorch archive (a checkpoint, an export, a file that
// torch.save wrote) passes before LibTorch reads it, and the checks of what LibTorch read.
// LibTorch's own readers check neither the zip nor the pickles and can crash on corrupt or
// crafted bytes (found by fuzz/fuzz_checkpoint). Implemented in archive_check.cpp; used by
// checkpoint.cpp and export.cpp.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace seqmix::train::detail {

// The entries of an archive, read once through libzip: every tensor record's size, and the
// whole text of the other (small) entries.
struct ZipEntries {
  std::string prefix;                          ///< "archive/": the folder LibTorch reads from
  std::map<std::string, uint64_t> sizes;       ///< every entry: its uncompressed size in bytes
  std::map<std::string, std::string> texts;    ///< every entry but the tensor records
};

// "<noun> '<path>' is corrupt or not <not_a> (<why>)": `noun` names the file ("checkpoint",
// "export"), `not_a` what it should have been.
std::runtime_error corrupt_checkpoint(const std::string& path, const std::string& why,
                                      const std::string& noun = "checkpoint",
                                      const std::string& not_a = "a checkpoint");

// "<noun> '<path>' is corrupt: <why>": a file whose zip is sound but whose contents are not.
std::runtime_error corrupt_contents(const std::string& path, const std::string& why,
                                    const std::string& noun = "checkpoint");

// Reads every entry of the zip archive through libzip, checking its structure and each
// entry's CRC-32. @throws std::runtime_error (corrupt_checkpoint) naming the fault.
ZipEntries verify_archive(const std::string& path, const std::string& noun = "checkpoint",
                          const std::string& not_a = "a checkpoint");

// The archive format version record: decimal digits, within what LibTorch reads.
void verify_version(const std::string& path, const ZipEntries& zip,
                    const std::string& noun = "checkpoint");

// Everything LibTorch will read from a checkpoint, checked before it reads it: known entries
// only, every pickle (data, constants, TorchScript code and debug tables) on the abstract
// unpickler, every storage record exactly the size its tensors need.
void verify_contents(const std::string& path, const ZipEntries& zip);

// The same for a plain pickle (an export, a torch.save'd state dict): data.pkl holds a dict
// of strings, numbers, lists, tuples and tensors only.
void verify_plain_contents(const std::string& path, const ZipEntries& zip,
                           const std::string& noun);

// Verifies `path` as a zip archive holding one plain pickle, as Python's torch.save and
// torch::pickle_save write it, before torch::pickle_load reads it (checkpoint.cpp: it first
// tells a run folder, a checkpoint or a special file apart). `noun` names the file in
// messages ("export"), `not_a` what it should have been ("a seqmix export or state dict").
// @throws std::runtime_error "<noun> '<path>' does not exist", "<noun> '<path>' is corrupt or
//         not <not_a> (zip: ...)", "<noun> '<path>' is corrupt: ...".
void verify_plain_pickle(const std::string& path, const std::string& noun,
                         const std::string& not_a);

// Every tensor inside `v`, with its name: object attributes joined with '.', under `name`.
void collect_tensors(const c10::IValue& v, const std::string& name,
                     std::vector<std::pair<std::string, at::Tensor>>& out, int depth = 0);

// A tensor as LibTorch made it: dense, on the CPU, inside its storage.
// @throws std::runtime_error "<noun> '<path>' is corrupt: tensor '<name>' ...".
void check_loaded_tensor(const std::string& path, const std::string& name, const at::Tensor& t,
                         const std::string& noun = "checkpoint");

// True unless a floating tensor holds NaN or infinity (the check checkpoints apply).
bool finite_values(const at::Tensor& t);

}  // namespace seqmix::train::detail
