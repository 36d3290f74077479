// TOML structure: nesting and size. The input is a program that writes a TOML text -- table
// headers and dotted keys with many segments, arrays and inline tables nested to any depth,
// quoted keys and strings full of brackets and dots, comments, repeats that grow it past a
// megabyte -- which then goes to every place seqmix parses TOML: the text check
// (check_toml_text), RunConfig::from_toml (checkpoints, exports, plot, seqmix.build), a
// --config file (resolve_config) and an override value. Nothing may crash (a stack overflow
// in toml++ was one), and the check must be an upper bound: a text it accepts parses to a
// tree at most 32 levels deep (walked here without recursion), or it is reported as a crash.
#include <toml++/toml.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_input.h"
#include "seqmix/train/configuration/config.h"

namespace {

struct Bytes {
  const uint8_t* data;
  size_t size, pos = 0;
  uint8_t u8() { return pos < size ? data[pos++] : 0; }
  size_t count(size_t most) {  // small counts mostly, sometimes very large ones
    const uint8_t k = u8();
    if (k < 192) return k % 8;
    if (k < 248) return (static_cast<size_t>(u8()) << 8 | u8()) % most;
    return most;
  }
};

const char* const kAtoms[] = {"1", "1.5", "-0.0", "inf", "nan", "'s.t[r]'", "\"a{b}c\"",
                              "true", "1979-05-27", "07:32:00", "'''x\n[y]'''",
                              "\"\"\"q\n{.}\"\"\"", "[]", "{}", "0x1f", "1e400"};

std::string key(Bytes& in) {
  switch (in.u8() % 4) {
    case 0: return "a";
    case 1: return "\"q.u[o]t{e}d\"";
    case 2: return "'lit.eral'";
    default: return "model";
  }
}

std::string dotted(Bytes& in, size_t segments) {
  std::string k = key(in);
  for (size_t i = 0; i < segments; ++i) k += "." + key(in);
  return k;
}

// A value nested `depth` levels: arrays and inline tables, chosen by the input.
std::string value(Bytes& in, size_t depth) {
  std::string open, close;
  for (size_t i = 0; i < depth; ++i) {
    if (in.u8() & 1) {
      open += "[";
      close = "]" + close;
    } else {
      open += "{" + dotted(in, in.u8() % 3) + " = ";
      close = "}" + close;
    }
  }
  return open + kAtoms[in.u8() % (sizeof kAtoms / sizeof kAtoms[0])] + close;
}

std::string program(Bytes& in) {
  std::string text;
  while (in.pos < in.size && text.size() < (3u << 20)) {
    std::string piece;
    switch (in.u8() % 7) {
      case 0: piece = "[" + dotted(in, in.count(60000)) + "]\n"; break;
      case 1: piece = "[[" + dotted(in, in.count(60000)) + "]]\n"; break;
      case 2: piece = dotted(in, in.count(60000)) + " = " + value(in, in.count(60000)) + "\n"; break;
      case 3: piece = "x = " + value(in, in.count(60000)) + "\n"; break;
      case 4: piece = "# [[{{ " + std::string(in.count(100), '[') + "\n"; break;
      case 5: piece = "s = '" + std::string(in.count(60000), '.') + "'\n"; break;
      default: {  // repeat what is there: sizes past the 1 MiB bound
        const size_t times = in.count(64);
        const std::string copy = text;
        for (size_t i = 0; i < times && text.size() < (3u << 20); ++i) text += copy;
      }
    }
    text += piece;
  }
  return text;
}

// The depth of the parsed tree, without recursion (the walk must not be what overflows).
size_t depth_of(const toml::node& root) {
  size_t most = 0;
  std::vector<std::pair<const toml::node*, size_t>> stack{{&root, 0}};
  while (!stack.empty()) {
    const auto [n, d] = stack.back();
    stack.pop_back();
    most = std::max(most, d);
    if (const auto* t = n->as_table())
      for (const auto& [k, v] : *t) stack.emplace_back(&v, d + 1);
    else if (const auto* a = n->as_array())
      for (const auto& v : *a) stack.emplace_back(&v, d + 1);
  }
  return most;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  const std::string text = program(in);
  bool accepted = true;
  try {
    seqmix::train::check_toml_text(text, "fuzz");
  } catch (const std::runtime_error&) {
    accepted = false;
  }
  if (accepted) {
    // The bound holds: toml++ itself never builds more than 32 levels (below the root).
    try {
      const toml::table parsed = toml::parse(text);
      if (depth_of(parsed) > 32) std::abort();
    } catch (const toml::parse_error&) {
    }
  }
  try {
    (void)seqmix::train::RunConfig::from_toml(text, "fuzz");
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  const std::string path =
      seqmix::fuzz::write_input(seqmix::fuzz::scratch() / "structure.toml",
                                reinterpret_cast<const uint8_t*>(text.data()), text.size());
  try {
    (void)seqmix::train::resolve_config(path, {});
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  try {
    (void)seqmix::train::resolve_config("", {"model.mixers=" + text.substr(0, 1 << 16)});
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
