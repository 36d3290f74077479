// The checkpoint loader: configuration, tokenizer record, weights, optimizer and RNG state.
//
// An input is one of two things, told apart by its first two bytes:
//  - "PK...": a whole checkpoint file, loaded as it is. Byte-level mutations of a zip mostly
//    break its structure or a CRC-32, so these inputs exercise the archive checks.
//  - anything else: a mutation program applied to a valid seed checkpoint (the file named by
//    $SEQMIX_FUZZ_CHECKPOINT_SEED, default seeds/checkpoint_seed.pt, which scripts/fuzz.sh
//    makes). The program rewrites entries *inside* the archive (truncates or empties a
//    `data/N` tensor record, overwrites bytes, edits the integers and opcodes of the pickles:
//    storage sizes, tensor sizes, strides, offsets) and the result is written back as a valid
//    zip with correct CRCs, so every input reaches the contents checks behind the CRC check.
//
// A program is a sequence of up to 8 operations, each [op][entry selector][arguments...]
// read from the input bytes (missing bytes read as 0); see apply_op(). After loading, the
// target reads every value of the weights and the optimizer state the way evaluation and
// training would (in instrumented code, so AddressSanitizer sees a read past a storage).
#include <torch/optim/adamw.h>
#include <zip.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "seqmix/train/serialization/checkpoint.h"

namespace {

struct Entry {
  std::string name;
  std::string bytes;
};

// The seed checkpoint's entries, in archive order, read once.
const std::vector<Entry>& seed_entries() {
  static const std::vector<Entry> entries = [] {
    const char* env = std::getenv("SEQMIX_FUZZ_CHECKPOINT_SEED");
    const std::string path = env ? env : "seeds/checkpoint_seed.pt";
    int code = 0;
    zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &code);
    if (!z) {
      fprintf(stderr, "fuzz_checkpoint: cannot open the seed checkpoint '%s' "
                      "(set SEQMIX_FUZZ_CHECKPOINT_SEED)\n", path.c_str());
      std::abort();
    }
    std::vector<Entry> out;
    const zip_int64_t n = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st);
      Entry e{st.name, std::string(static_cast<size_t>(st.size), '\0')};
      zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
      if (!f || zip_fread(f, e.bytes.data(), e.bytes.size()) != static_cast<zip_int64_t>(st.size))
        std::abort();
      zip_fclose(f);
      out.push_back(std::move(e));
    }
    zip_discard(z);
    return out;
  }();
  return entries;
}

// Reads the program; bytes past its end read as 0.
struct Program {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  bool done() const { return pos >= size; }
  uint8_t u8() { return pos < size ? data[pos++] : 0; }
  uint32_t u16() { return u8() | (uint32_t(u8()) << 8); }
  uint32_t u32() { return u16() | (u16() << 16); }
  std::string bytes(size_t n) {
    std::string s;
    while (n-- > 0) s.push_back(static_cast<char>(u8()));
    return s;
  }
};

// The opcodes of a pickle as written by LibTorch (protocol 2): [start, end) of each.
std::vector<std::pair<size_t, size_t>> pickle_ops(const std::string& p) {
  std::vector<std::pair<size_t, size_t>> ops;
  size_t i = 0;
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<uint8_t>(p[at + k]);
    return v;
  };
  while (i < p.size()) {
    const uint8_t op = static_cast<uint8_t>(p[i]);
    size_t len = 1;
    switch (op) {
      case 0x80: case 'q': case 'h': case 'K': len = 2; break;      // PROTO BINPUT BINGET BININT1
      case 'M': len = 3; break;                                     // BININT2
      case 'r': case 'j': case 'J': len = 5; break;                 // LONG_BINPUT LONG_BINGET BININT
      case 'G': len = 9; break;                                     // BINFLOAT
      case 0x8a: len = i + 1 < p.size() ? 2 + static_cast<uint8_t>(p[i + 1]) : 2; break;  // LONG1
      case 'X': len = i + 5 <= p.size() ? 5 + size_t(u32(i + 1)) : 5; break;            // BINUNICODE
      case 'c': {                                                   // GLOBAL: two lines
        size_t a = p.find('\n', i + 1);
        size_t b = a == std::string::npos ? a : p.find('\n', a + 1);
        len = b == std::string::npos ? p.size() - i : b + 1 - i;
        break;
      }
      default: break;
    }
    len = std::min(len, p.size() - i);
    ops.emplace_back(i, i + len);
    if (op == '.') break;  // STOP
    i += len;
  }
  return ops;
}

bool is_int_op(char c) { return c == 'K' || c == 'M' || c == 'J' || c == static_cast<char>(0x8a); }

int64_t read_int(const std::string& p, std::pair<size_t, size_t> op) {
  const size_t b = op.first + (p[op.first] == static_cast<char>(0x8a) ? 2 : 1);
  uint64_t v = 0;
  for (size_t k = op.second; k-- > b;) v = (v << 8) | static_cast<uint8_t>(p[k]);
  const size_t n = op.second - b;
  if (p[op.first] == 'J' || p[op.first] == static_cast<char>(0x8a)) {
    if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
  }
  return static_cast<int64_t>(v);
}

// The smallest pickle opcode holding v, as LibTorch's pickler would write it.
std::string encode_int(int64_t v) {
  std::string s;
  auto le = [&](uint64_t x, int n) {
    for (int k = 0; k < n; ++k) s.push_back(static_cast<char>((x >> (8 * k)) & 0xff));
  };
  if (v >= 0 && v <= 0xff) {
    s.push_back('K');
    le(static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v <= 0xffff) {
    s.push_back('M');
    le(static_cast<uint64_t>(v), 2);
  } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    s.push_back('J');
    le(static_cast<uint64_t>(v), 4);
  } else {
    s.push_back(static_cast<char>(0x8a));
    s.push_back(8);
    le(static_cast<uint64_t>(v), 8);
  }
  return s;
}

int64_t interesting(Program& prog, int64_t old) {
  static const int64_t table[] = {0, 1, -1, 2, 3, 4, 7, 8, 16, 31, 32, 63, 64, 255, 256,
                                  4095, 4096, 65535, 65536, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(), int64_t(1) << 31,
                                  int64_t(1) << 40, int64_t(1) << 61, int64_t(1) << 62,
                                  std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()};
  const uint8_t c = prog.u8();
  constexpr size_t n = sizeof(table) / sizeof(table[0]);
  if (c < n) return table[c];
  // Wrapping arithmetic: the pickle's value may be anything.
  const uint64_t u = static_cast<uint64_t>(old);
  switch (c % 6) {
    case 0: return static_cast<int64_t>(u + 1);
    case 1: return static_cast<int64_t>(u - 1);
    case 2: return static_cast<int64_t>(u * 2);
    case 3: return old / 2;
    case 4: return static_cast<int64_t>(u + static_cast<uint64_t>(static_cast<int8_t>(prog.u8())));
    default: return static_cast<int64_t>(0 - u);
  }
}

size_t pick_entry(Program& prog, const std::vector<Entry>& entries) {
  const uint8_t sel = prog.u8();
  std::vector<size_t> data, pkl;  // pkl: data.pkl first, then the other pickles
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& n = entries[i].name;
    if (n.find("/data/") != std::string::npos) data.push_back(i);
    if (n.find("/code/") != std::string::npos) continue;
    if (n.size() >= 8 && n.compare(n.size() - 8, 8, "data.pkl") == 0)
      pkl.insert(pkl.begin(), i);
    else if (n.size() > 4 && n.compare(n.size() - 4, 4, ".pkl") == 0)
      pkl.push_back(i);
  }
  // Mostly data.pkl (sizes, strides, offsets, storage sizes) and the tensor records.
  if (sel < 112 && !pkl.empty()) return pkl[(sel & 15) == 0 ? (sel >> 4) % pkl.size() : 0];
  if (sel < 224 && !data.empty()) return data[prog.u16() % data.size()];
  return prog.u16() % entries.size();
}

// One operation of the program on `entries`.
void apply_op(Program& prog, std::vector<Entry>& entries) {
  if (entries.empty()) return;
  const uint8_t op = prog.u8() % 12;
  Entry& e = entries[pick_entry(prog, entries)];
  std::string& b = e.bytes;
  switch (op) {
    case 0:  // truncate
      b.resize(prog.u32() % (b.size() + 1));
      break;
    case 1:  // empty
      b.clear();
      break;
    case 2: {  // overwrite a few bytes
      if (b.empty()) break;
      const size_t at = prog.u32() % b.size();
      const std::string s = prog.bytes(prog.u8() % 8 + 1);
      for (size_t k = 0; k < s.size() && at + k < b.size(); ++k) b[at + k] = s[k];
      break;
    }
    case 3: {  // insert bytes
      const size_t at = prog.u32() % (b.size() + 1);
      b.insert(at, prog.bytes(prog.u8() % 8 + 1));
      break;
    }
    case 4: {  // erase a range
      if (b.empty()) break;
      const size_t at = prog.u32() % b.size();
      b.erase(at, prog.u16() % 64 + 1);
      break;
    }
    case 5: case 6: {  // set one of the pickle's integers (sizes, strides, offsets, numels, ...)
      const auto ops = pickle_ops(b);
      std::vector<std::pair<size_t, size_t>> ints;
      for (const auto& o : ops)
        if (is_int_op(b[o.first])) ints.push_back(o);
      if (ints.empty()) break;
      const auto o = ints[prog.u16() % ints.size()];
      const int64_t v = interesting(prog, read_int(b, o));
      b.replace(o.first, o.second - o.first, encode_int(v));
      break;
    }
    case 7: {  // delete one opcode
      const auto ops = pickle_ops(b);
      if (ops.empty()) break;
      const auto o = ops[prog.u16() % ops.size()];
      b.erase(o.first, o.second - o.first);
      break;
    }
    case 8: {  // duplicate one opcode
      const auto ops = pickle_ops(b);
      if (ops.empty()) break;
      const auto o = ops[prog.u16() % ops.size()];
      b.insert(o.second, b.substr(o.first, o.second - o.first));
      break;
    }
    case 9: {  // replace one opcode by an argument-less one
      static const char simple[] = {'(', 't', ')', ']', '}', 'e', 'u', 'N', 'R', 'b', 'Q', '.',
                                    static_cast<char>(0x81), static_cast<char>(0x85),
                                    static_cast<char>(0x86), static_cast<char>(0x87),
                                    static_cast<char>(0x88), static_cast<char>(0x89)};
      const auto ops = pickle_ops(b);
      if (ops.empty()) break;
      const auto o = ops[prog.u16() % ops.size()];
      b.replace(o.first, o.second - o.first, 1, simple[prog.u8() % sizeof(simple)]);
      break;
    }
    case 10: {  // the content of another entry
      b = entries[prog.u16() % entries.size()].bytes;
      break;
    }
    default: {  // remove the entry
      const size_t i = static_cast<size_t>(&e - entries.data());
      entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
}

// Writes `entries` as a zip (stored, correct CRCs) at `path`.
void write_zip(const std::string& path, const std::vector<Entry>& entries) {
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  if (!z) std::abort();
  for (const Entry& e : entries) {
    zip_source_t* src = zip_source_buffer(z, e.bytes.data(), e.bytes.size(), 0);
    const zip_int64_t i = src ? zip_file_add(z, e.name.c_str(), src, ZIP_FL_OVERWRITE) : -1;
    if (i < 0) {
      if (src) zip_source_free(src);
      continue;
    }
    zip_set_file_compression(z, static_cast<zip_uint64_t>(i), ZIP_CM_STORE, 0);
  }
  if (zip_close(z) != 0) std::abort();
}

// Reads every element of `t` (float or byte) in instrumented code, as a forward pass would.
double touch(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0 || t.numel() > (int64_t(1) << 24)) return 0;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  std::vector<int64_t> idx(sizes.size(), 0);
  double sum = 0;
  const bool is_float = t.scalar_type() == at::kFloat;
  if (!is_float && t.scalar_type() != at::kByte) return 0;
  const char* base = static_cast<const char*>(t.data_ptr());
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
    if (is_float) {
      float v;
      std::memcpy(&v, base + off * 4, 4);
      sum += v;
    } else {
      sum += static_cast<uint8_t>(base[off]);
    }
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
  return sum;
}

// As the trainer builds it: decayed weight matrices, and the rest.
std::unique_ptr<torch::optim::AdamW> make_optimizer(seqmix::models::SequenceModel& model) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : model->named_parameters()) {
    const std::string& k = p.key();
    const bool w = k.size() >= 6 && k.compare(k.size() - 6, 6, "weight") == 0;
    (w && p.value().dim() >= 2 ? decay : no_decay).push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(1e-3));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(1e-3));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(1e-3));
}

void load(const std::string& path) {
  seqmix::train::CheckpointFile ck(path);
  const auto& config = ck.config();
  // SentencePiece runs in a plugin loaded with RTLD_DEEPBIND, which AddressSanitizer
  // refuses; its model loader has its own target (fuzz_tokenizer).
  if (config.data.tokenizer == "bytes") (void)ck.tokenizer();
  // A configuration is only a promise: building a huge model from a corrupt one would
  // test the allocator, not the loader.
  if (config.model.num_parameters() >= 2'000'000) return;
  seqmix::models::SequenceModel model(config.model);
  auto optimizer = make_optimizer(model);
  (void)ck.load(model, optimizer.get());
  volatile double sink = 0;
  for (const auto& p : model->parameters()) sink = sink + touch(p);
  for (const auto& p : model->buffers()) sink = sink + touch(p);
  for (auto& group : optimizer->param_groups())
    for (auto& p : group.params()) {
      auto it = optimizer->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it == optimizer->state().end()) continue;
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      sink = sink + touch(s.exp_avg()) + touch(s.exp_avg_sq());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path;
  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    path = seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "checkpoint.pt", data, size);
  } else {
    std::vector<Entry> entries = seed_entries();
    Program prog{data, size};
    for (int k = 0; k < 8 && !prog.done(); ++k) apply_op(prog, entries);
    path = (seqmix::fuzz::scratch() / "mutated.pt").string();
    write_zip(path, entries);
  }
  try {
    load(path);
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
