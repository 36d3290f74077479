// Config files, structure-aware: most inputs are a list of edits to a valid configuration
// (a key of [model], [data] or [train] set to a boundary value of its type, a value from the
// dictionary of names seqmix knows, or a value of the wrong type), so the fuzzer spends its
// time in validation, the resource checks and model construction rather than in the TOML
// parser. A configuration that passes every check and is small is built and run forward, as
// `seqmix train` would. One input in four is also read as raw TOML text, which keeps the
// parser covered.
#include <toml++/toml.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "fuzz_input.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/configuration/config.h"

namespace {

// Reads the fuzz input as a stream of small integers; an exhausted input reads zeros.
struct Bytes {
  const uint8_t* data;
  size_t size, pos = 0;
  uint8_t u8() { return pos < size ? data[pos++] : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | u8();
    return v;
  }
};

const char* const kNames[] = {
    "aib", "attention", "ces", "extractor", "fused", "reference", "kernel", "fft", "exp",
    "ones", "prefix_exp", "gelu", "relu", "leaky_relu", "layer", "batch", "cosine", "linear",
    "constant", "stop", "skip", "valid", "test", "bytes", "listops", "text", "image",
    "pathfinder", "pathx", "retrieval", "weird-net", "transformer", "etsmlp", "tiny", "paper",
    "cpu", "omega", "sigmoid", "", "/dev/zero", "/nonexistent", "a\nb", "\xff\xfe"};

int64_t boundary_int(Bytes& in) {
  static const int64_t kInts[] = {0, -1, 1, 2, 3, 7, 8, 16, 63, 64, 255, 256, 257, 4096,
                                  1 << 20, int64_t{1} << 31, int64_t{1} << 40,
                                  std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()};
  const uint8_t k = in.u8();
  if (k < 200) return kInts[k % (sizeof kInts / sizeof kInts[0])];
  return static_cast<int64_t>(in.u64());
}

double boundary_double(Bytes& in) {
  static const double kDoubles[] = {0.0, -0.0, 1.0, -1.0, 0.5, 0.9999, 1e-300, 1e300, 1e-8,
                                    std::numeric_limits<double>::quiet_NaN(),
                                    std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity()};
  const uint8_t k = in.u8();
  if (k < 200) return kDoubles[k % (sizeof kDoubles / sizeof kDoubles[0])];
  const uint64_t bits = in.u64();
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

std::string name(Bytes& in) { return kNames[in.u8() % (sizeof kNames / sizeof kNames[0])]; }

// A value for a key whose current value has type `like`; sometimes of another type.
void set_value(toml::table& section, const std::string& key, toml::node_type like, Bytes& in) {
  const uint8_t kind = in.u8();
  const toml::node_type t = kind < 224 ? like : static_cast<toml::node_type>(2 + kind % 6);
  switch (t) {
    case toml::node_type::integer:
      section.insert_or_assign(key, boundary_int(in));
      break;
    case toml::node_type::floating_point:
      section.insert_or_assign(key, boundary_double(in));
      break;
    case toml::node_type::boolean:
      section.insert_or_assign(key, (in.u8() & 1) != 0);
      break;
    case toml::node_type::array: {
      toml::array a;
      for (uint8_t n = in.u8() % 5; n > 0; --n) a.push_back(name(in));
      section.insert_or_assign(key, std::move(a));
      break;
    }
    default:
      section.insert_or_assign(key, name(in));
  }
}

// Applies the input's edits to the default configuration; returns its TOML text.
std::string edited_config(Bytes& in) {
  seqmix::train::RunConfig base;
  toml::table t = toml::parse(base.to_toml());
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& [section, table] : t)
    for (const auto& [key, value] : *table.as_table())
      keys.emplace_back(std::string(section.str()), std::string(key.str()));
  for (uint8_t edits = in.u8() % 8 + 1; edits > 0 && in.pos < in.size; --edits) {
    const auto& [section, key] = keys[in.u8() % keys.size()];
    toml::table& s = *t[section].as_table();
    set_value(s, key, s[key].type(), in);
  }
  std::ostringstream out;
  out << t;
  return out.str();
}

// What `seqmix train` does with a configuration before its first step, for small ones.
void build_and_run(const seqmix::train::RunConfig& c) {
  const auto& m = c.model;
  if (m.num_parameters() > 2'000'000 || m.max_len > 512 || m.n_layers > 8) return;
  seqmix::models::SequenceModel model(m);
  const int64_t L = std::min<int64_t>(m.max_len, 17);
  const at::Tensor x = at::randint(0, m.vocab_size, {2, L}, at::kLong);
  if (m.n_classes > 0) return;  // classifiers take masked, collated batches
  (void)model->forward(x);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  const bool raw = size > 0 && (data[0] & 3) == 0;
  const std::string text =
      raw ? std::string(reinterpret_cast<const char*>(data) + 1, size - 1) : edited_config(in);
  std::optional<seqmix::train::RunConfig> config;
  try {
    config = seqmix::train::RunConfig::from_toml(text, "fuzz");
    config->check_resources();
  } catch (const std::runtime_error&) {
    config.reset();
  } catch (const std::invalid_argument&) {
    config.reset();
  }
  // A configuration every check accepted must build and run: LibTorch refusing it (a
  // c10::Error) means a check is missing, and is reported like a crash.
  if (config) build_and_run(*config);
  if (raw) {
    const std::string path =
        seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "config.toml", data, size);
    try {
      (void)seqmix::train::resolve_config(path, {});
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
