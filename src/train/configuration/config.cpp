#include "seqmix/train/configuration/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <type_traits>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/listops.h"
#include "seqmix/data/pathfinder.h"
#include "seqmix/data/tasks.h"
#include "seqmix/models/mixer_registry.h"
#include "seqmix/models/presets.h"
#include "seqmix/train/configuration/task_presets.h"
#include "seqmix/util/device.h"
#include "seqmix/util/fields.h"
#include "seqmix/util/memory.h"

namespace seqmix::train {

namespace {

using util::Field;
using util::FieldValue;

// No control characters (newline, escape, ...): paths reach messages, JSON and plot scripts.
std::string plain_text_check(const std::string& v) {
  for (const unsigned char ch : v)
    if (ch < 0x20 || ch == 0x7f)
      return "must not contain control characters (newline, tab, escape, ...)";
  return "";
}

// "must be 0 (the default) or in [lo, hi]"-style checks of one integer field.
template <class S>
typename Field<S>::Check default_or_range(int64_t S::*m, int64_t none, int64_t lo, int64_t hi,
                                          std::string what) {
  return [=](const S& s) -> std::string {
    const int64_t v = s.*m;
    if (v == none || (v >= lo && v <= hi)) return "";
    return what + std::to_string(hi) + "], got " + std::to_string(v);
  };
}

// Each field's own check lives with its declaration; checks that relate fields of several
// sections (a task's vocabulary and the model's, a Pathfinder image and model.max_len) are
// RunConfig::validate's.
const std::vector<Field<DataConfig>>& data_fields() {
  using D = DataConfig;
  static const std::vector<Field<D>> f = {
      {"source", &D::source, "corpus name or text file/folder",
       [](const D& d) -> std::string {
         if (d.source.empty())
           return "must name a corpus (sotu, moby-dick) or a text file or folder";
         return plain_text_check(d.source);
       },
       false, "--data"},
      {"dir", &D::dir, "folder scripts/setup.sh fills ('': the default lookup)",
       [](const D& d) { return plain_text_check(d.dir); }, false, "--data-dir"},
      {"eval_split", &D::eval_split, "valid or test",
       util::one_of<D>(&D::eval_split, {"valid", "test"})},
      {"tokenizer", &D::tokenizer, "bytes or a SentencePiece model path",
       [](const D& d) -> std::string {
         if (d.tokenizer.empty()) return "must be 'bytes' or a SentencePiece model path";
         return plain_text_check(d.tokenizer);
       },
       true, "--tokenizer"},
      {"task", &D::task, "classification task ('': language modelling)", {}, true, "--task"},
      {"task_seed", &D::task_seed, "task data generation and splits",
       util::at_least<D>(&D::task_seed, 0), true},
      {"train_examples", &D::train_examples, "examples (0: the task's default)",
       util::at_least<D>(&D::train_examples, 0, " (0: the task's default)"), true},
      {"valid_examples", &D::valid_examples, "examples (0: the task's default)",
       util::at_least<D>(&D::valid_examples, 0, " (0: the task's default)"), true},
      {"test_examples", &D::test_examples, "examples (0: the task's default)",
       util::at_least<D>(&D::test_examples, 0, " (0: the task's default)"), true},
      {"pad_to_multiple", &D::pad_to_multiple, "task batches padded to a multiple of this",
       util::at_least<D>(&D::pad_to_multiple, 1), true},
      {"pathfinder_dashes", &D::pathfinder_dashes,
       "dashes per Pathfinder path (0: 14 at 32 px, LRA's hard set)",
       default_or_range<D>(&D::pathfinder_dashes, 0, 2, D::kMaxPathfinderDashes,
                           "must be 0 (the default) or in [2, "),
       true},
      {"pathfinder_distractors", &D::pathfinder_distractors,
       "Pathfinder distractor paths (-1: the default, 5 at 32 px)",
       default_or_range<D>(&D::pathfinder_distractors, -1, 0, D::kMaxPathfinderDistractors,
                           "must be -1 (the default) or in [0, "),
       true},
      {"pathfinder_resolution", &D::pathfinder_resolution,
       "Pathfinder image side in pixels (0: the task's, 32 or 128)",
       [](const D& d) -> std::string {
         const int64_t v = d.pathfinder_resolution;
         const int64_t lo = data::PathfinderOptions::kMinResolution,
                       hi = data::PathfinderOptions::kMaxResolution;
         if (v == 0 || (v >= lo && v <= hi)) return "";
         return "must be 0 (the task's: 32 for pathfinder, 128 for pathx) or in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "] pixels, got " +
                std::to_string(v);
       },
       true},
      {"retrieval_negative_neighbours", &D::retrieval_negative_neighbours,
       "Retrieval negatives from this many presidents each side (-1: 2; 0: any)",
       default_or_range<D>(&D::retrieval_negative_neighbours, -1, 0,
                           D::kMaxRetrievalNegativeNeighbours,
                           "must be -1 (the default, 2), 0 (any president) or in [1, "),
       true},
  };
  return f;
}

const std::vector<Field<TrainConfig>>& train_fields() {
  using T = TrainConfig;
  static const std::vector<Field<T>> f = {
      {"batch_size", &T::batch_size, "sequences per step", util::at_least<T>(&T::batch_size, 1),
       false, "--batch-size"},
      {"max_steps", &T::max_steps, "optimizer steps", util::at_least<T>(&T::max_steps, 0), false,
       "--max-steps"},
      {"lr", &T::lr, "peak learning rate", util::float32_above<T>(&T::lr, 0, true), false,
       "--lr"},
      {"min_lr_ratio", &T::min_lr_ratio, "final lr = lr x this",
       util::in_range<T>(&T::min_lr_ratio, 0, 1, false, " (final lr = lr x this)")},
      {"warmup_steps", &T::warmup_steps, "linear warm-up steps",
       util::at_least<T>(&T::warmup_steps, 0)},
      {"schedule", &T::schedule, "cosine | linear | constant",
       util::one_of<T>(&T::schedule, {"cosine", "linear", "constant"})},
      {"decay_steps", &T::decay_steps, "steps the schedule decays over (0: max_steps)",
       util::at_least<T>(&T::decay_steps, 0, " (0: train.max_steps)"), true},
      {"weight_decay", &T::weight_decay, "AdamW decoupled decay (weight matrices)",
       util::float32_above<T>(&T::weight_decay, 0, false)},
      {"beta1", &T::beta1, "AdamW beta1", util::in_range<T>(&T::beta1, 0, 1, true)},
      {"beta2", &T::beta2, "AdamW beta2", util::in_range<T>(&T::beta2, 0, 1, true)},
      {"eps", &T::eps, "AdamW epsilon", util::float32_above<T>(&T::eps, 0, true)},
      {"grad_clip", &T::grad_clip, "max global gradient norm (0: off)",
       util::float32_above<T>(&T::grad_clip, 0, false, " (0: no clipping)")},
      {"eval_interval", &T::eval_interval, "steps between evaluations (0: at the end)",
       util::at_least<T>(&T::eval_interval, 0, " (0: only at the end)")},
      {"eval_max_bytes", &T::eval_max_bytes, "held-out tokens per periodic evaluation",
       util::at_least<T>(&T::eval_max_bytes, 0, " (0: the whole split)")},
      {"checkpoint_interval", &T::checkpoint_interval, "steps between checkpoints",
       util::at_least<T>(&T::checkpoint_interval, 0, " (0: only at the end)")},
      {"log_interval", &T::log_interval, "steps between metrics lines",
       util::at_least<T>(&T::log_interval, 1)},
      {"seed", &T::seed, "init, batch order, sampling", util::at_least<T>(&T::seed, 0), false,
       "--seed"},
      {"threads", &T::threads, "intra-op threads (0: all)",
       util::at_least<T>(&T::threads, 0, " (0: all hardware threads)"), false, "--threads"},
      {"nonfinite", &T::nonfinite, "stop | skip on a non-finite loss",
       util::one_of<T>(&T::nonfinite, {"stop", "skip"}), true},
      {"precision", &T::precision, "fp32 | bf16 (bfloat16 matrix products, fp32 weights)",
       util::one_of<T>(&T::precision, {"fp32", "bf16"}), true, "--precision"},
      {"device", &T::device, "cpu | cuda | cuda:N (the device the run computes on)",
       [](const T& t) { return util::device_error(t.device); }, true, "--device"},
  };
  return f;
}

// Calls f(section path, struct, fields) for every section of a RunConfig: [model] and its
// mixer sections, [data], [train]. The one walk all the TOML code below is built on.
template <class Config, class F>
void visit_sections(Config& c, F&& f) {
  models::ModelConfig::visit_sections(c.model, [&](const std::string& path, auto& s,
                                                   const auto& fields) {
    f(path.empty() ? std::string("model") : "model." + path, s, fields);
  });
  f(std::string("data"), c.data, data_fields());
  f(std::string("train"), c.train, train_fields());
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(path.substr(start, dot - start));
  parts.push_back(path.substr(start));
  return parts;
}

// The table at `path` ("model.aib") in `t`, created if absent.
// @throws std::runtime_error naming `origin` when a part exists but is not a table.
toml::table& table_at(toml::table& t, const std::string& path, const std::string& origin = "") {
  toml::table* cur = &t;
  std::string walked;
  for (const auto& part : split_path(path)) {
    walked += (walked.empty() ? "" : ".") + part;
    if (!cur->contains(part)) cur->insert(part, toml::table{});
    cur = (*cur)[part].as_table();
    if (!cur)
      throw std::runtime_error(origin + ": '" + walked + "' must be a table such as [" + walked +
                               "]");
  }
  return *cur;
}

// The node at dotted `path` in `t`, or nullptr.
const toml::node* node_at(const toml::table& t, const std::string& path) {
  const toml::table* cur = &t;
  const auto parts = split_path(path);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    cur = cur->get_as<toml::table>(parts[i]);
    if (!cur) return nullptr;
  }
  return cur->get(parts.back());
}

void insert_value(toml::table& t, const std::string& key, const FieldValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          toml::array a;
          for (const auto& s : x) a.push_back(s);
          t.insert_or_assign(key, std::move(a));
        } else {
          t.insert_or_assign(key, x);
        }
      },
      v);
}

toml::table to_table(const RunConfig& c) {
  toml::table t;
  visit_sections(c, [&](const std::string& path, const auto& s, const auto& fields) {
    toml::table& sec = table_at(t, path);
    for (const auto& f : fields) insert_value(sec, f.name, f.get(s));
  });
  return t;
}

std::string type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "true or false";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time of day";
    case toml::node_type::date_time:
      return "a date and time";
    default:
      return "a value of another type";
  }
}

// The value of `n` as the type of `want`, or an error saying what `key` must be. An integer
// is accepted where a number is expected; a float never where an integer is (toml++'s
// converting value<int64_t>() casts before checking the range, undefined for 1e30).
FieldValue to_value(const toml::node& n, const FieldValue& want, const std::string& key,
                    const std::string& origin) {
  auto wrong = [&](const std::string& what) {
    return std::runtime_error(origin + ": '" + key + "' must be " + what + ", got " +
                              (n.is_floating_point() && want.index() == 0
                                   ? std::string("a floating-point number")
                                   : type_name(n.type())));
  };
  switch (want.index()) {
    case 0:
      if (const auto v = n.value_exact<int64_t>(); v && n.is_integer()) return *v;
      throw wrong("an integer");
    case 1:
      if (n.is_floating_point()) return *n.value<double>();
      if (n.is_integer()) return static_cast<double>(*n.value_exact<int64_t>());
      throw wrong("a number");
    case 2:
      if (n.is_boolean()) return *n.value<bool>();
      throw wrong("true or false");
    case 3:
      if (n.is_string()) return *n.value<std::string>();
      throw wrong("a string");
    default: {
      const toml::array* a = n.as_array();
      if (!a) throw wrong("an array of strings");
      std::vector<std::string> out;
      for (const auto& el : *a) {
        if (!el.is_string())
          throw std::runtime_error(origin + ": '" + key + "' must be an array of strings");
        out.push_back(*el.value<std::string>());
      }
      return out;
    }
  }
}

std::string known_keys(const toml::table& t) {
  std::string s;
  for (const auto& [k, v] : t) s += (s.empty() ? "" : ", ") + std::string(k.str());
  return s;
}

// Every key of `t` is one of `schema` (to_table of a configuration), tables where tables
// are; `path` names where we are in messages.
void check_known(const toml::table& t, const toml::table& schema, const std::string& path,
                 const std::string& origin) {
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    const std::string full = path.empty() ? key : path + "." + key;
    const toml::node* s = schema.get(key);
    if (!s) {
      if (path.empty())
        throw std::runtime_error(origin + ": unknown section '" + key + "' (expected " +
                                 known_keys(schema) + ")");
      throw std::runtime_error(origin + ": unknown key '" + full + "' (known: " +
                               known_keys(schema) + ")");
    }
    if (s->is_table()) {
      if (!v.is_table())
        throw std::runtime_error(origin + ": '" + full + "' must be a table such as [" + full +
                                 "]");
      check_known(*v.as_table(), *s->as_table(), full, origin);
    }
  }
}

// Reads a configuration table: every key known and of its field's type; a key added after
// the first release may be absent (its default, the behaviour before it existed); others
// must be present.
RunConfig from_table(const toml::table& t, const std::string& origin) {
  RunConfig c;
  visit_sections(c, [&](const std::string& path, auto& s, const auto& fields) {
    for (const auto& f : fields) {
      const std::string key = path + "." + f.name;
      const toml::node* n = node_at(t, key);
      if (!n) {
        // Mixer sections came with the typed configuration: a file without one (or with
        // part of one) means those fields' defaults.
        if (f.optional || path.rfind("model.", 0) == 0) continue;
        throw std::runtime_error(origin + ": missing key '" + key + "'");
      }
      try {
        f.set(s, to_value(*n, f.type(), key, origin));
      } catch (const std::invalid_argument& e) {  // a name the field's options cannot hold
        throw std::invalid_argument(key + ": " + e.what());
      }
    }
  });
  check_known(t, to_table(RunConfig()), "", origin);
  return c;
}

// A configuration is a few KB and nests three tables deep ([model.aib]); these bounds are far
// above any real one. They exist because toml++ parses, copies and frees nested tables and
// arrays recursively: a crafted 100 KB header `[a.a.a....]` 50,000 levels deep overflows
// the stack (a crash, even inside Python). The bounds are checked on the text, before toml++
// sees it.
constexpr size_t kMaxTomlBytes = size_t{1} << 20;
constexpr int kMaxTomlDepth = 32;

}  // namespace

// Throws unless `text` is at most kMaxTomlBytes and nests at most kMaxTomlDepth levels.
// The depth counted is an upper bound on the depth of the tree toml++ builds: outside
// strings and comments, a key's segments (a.b.c = 1, [a.b.c]) each count one level below
// the table they are in, and every [ or { opens one more below its key. Dots of a float
// value (x = 1.5) count too, which can only overestimate.
void check_toml_text(std::string_view text, const std::string& origin) {
  if (text.size() > kMaxTomlBytes)
    throw std::runtime_error(origin + ": " + std::to_string(text.size()) +
                             " bytes of TOML; a configuration is at most 1 MiB (" +
                             std::to_string(kMaxTomlBytes) + " bytes)");
  std::vector<int> levels{0};  // the depth of each open [ or { (the root table is 0)
  int dots = 0;                // dots of the key being read
  int value_depth = 0;         // after `key =`: the depth of the key's value, else 0
  int64_t line = 1;
  auto check = [&](int depth) {
    if (depth > kMaxTomlDepth)
      throw std::runtime_error(origin + ": TOML nested " + std::to_string(depth) +
                               "+ levels deep at line " + std::to_string(line) +
                               "; a configuration nests at most " +
                               std::to_string(kMaxTomlDepth) + " (e.g. [model.aib] is 2)");
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      dots = value_depth = 0;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      // A string (basic, literal, or either multi-line form): skip to its end. Lines inside
      // a multi-line string are still counted, for the message.
      const bool multi = text.substr(i, 3) == std::string_view(c == '"' ? "\"\"\"" : "'''");
      const size_t open = multi ? 3 : 1;
      size_t j = i + open;
      for (; j < text.size(); ++j) {
        if (text[j] == '\n') {
          ++line;
          if (!multi) break;  // an unterminated one-line string: toml++ reports it
        }
        if (c == '"' && text[j] == '\\') {
          ++j;
          if (j < text.size() && text[j] == '\n') ++line;
          continue;
        }
        if (text[j] == c && (!multi || text.substr(j, 3) == text.substr(i, 3))) break;
      }
      i = j + (multi ? 2 : 0);
    } else if (c == '[' || c == '{') {
      const int depth = (value_depth > 0 ? value_depth : levels.back() + dots) + 1;
      check(depth);
      levels.push_back(depth);
      dots = value_depth = 0;
    } else if (c == ']' || c == '}') {
      if (levels.size() > 1) levels.pop_back();  // unbalanced: toml++ reports it
      dots = value_depth = 0;
    } else if (c == '.') {
      check(levels.back() + ++dots + 1);
    } else if (c == '=') {
      value_depth = levels.back() + dots + 1;
      dots = 0;
    } else if (c == ',') {
      dots = value_depth = 0;
    }
  }
}

namespace {

toml::table parse_toml(const std::string& text, const std::string& origin) {
  check_toml_text(text, origin);
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream ss;
    ss << origin << ": not valid TOML at line " << e.source().begin.line << ": " << e.description();
    throw std::runtime_error(ss.str());
  }
}

// The type of the leaf `key` (dotted, e.g. "model.aib.weights") in `base` (a configuration's
// table), or an error naming `origin` when there is no such key.
FieldValue key_type(const toml::table& base, const std::string& key, const std::string& origin) {
  const auto dot = key.rfind('.');
  const std::string section = dot == std::string::npos ? "" : key.substr(0, dot);
  const std::string name = key.substr(dot + 1);
  const toml::node* sec_node = section.empty() ? nullptr : node_at(base, section);
  const toml::table* sec = sec_node ? sec_node->as_table() : nullptr;
  if (!sec) {
    if (section.find('.') == std::string::npos)
      throw std::runtime_error(origin + ": unknown section '" + section + "' (expected " +
                               known_keys(base) + ")");
    throw std::runtime_error(origin + ": unknown key '" + key + "'");
  }
  const toml::node* old = sec->get(name);
  if (!old)
    throw std::runtime_error(origin + ": unknown key '" + key + "' (known: " + known_keys(*sec) +
                             ")");
  if (old->is_table())
    throw std::runtime_error(origin + ": '" + key + "' is a section; set its keys, e.g. " + key +
                             "." + std::string(old->as_table()->cbegin()->first.str()));
  if (old->is_integer()) return int64_t{0};
  if (old->is_floating_point()) return 0.0;
  if (old->is_boolean()) return false;
  if (old->is_string()) return std::string();
  return std::vector<std::string>();
}

// Sets the leaf `key` of `base` to `value` after checking that the key exists and the type
// matches.
void assign(toml::table& base, const std::string& key, const toml::node& value,
            const std::string& origin) {
  const FieldValue want = key_type(base, key, origin);
  const auto dot = key.rfind('.');
  toml::table& sec = *const_cast<toml::node*>(node_at(base, key.substr(0, dot)))->as_table();
  insert_value(sec, key.substr(dot + 1), to_value(value, want, key, origin));
}

void merge_file(toml::table& base, const toml::table& file, const std::string& path,
                const std::string& origin) {
  for (const auto& [k, v] : file) {
    const std::string key = path.empty() ? std::string(k.str()) : path + "." + std::string(k.str());
    if (path.empty() && !v.is_table())
      throw std::runtime_error(origin + ": '" + key +
                               "' must be a table such as [model], [data] or [train]");
    const toml::node* b = node_at(base, key);
    if (v.is_table() && b && b->is_table()) {
      merge_file(base, *v.as_table(), key, origin);
      continue;
    }
    if (path.empty())
      throw std::runtime_error(origin + ": unknown section '" + key + "' (expected " +
                               known_keys(base) + ")");
    assign(base, key, v, origin);
  }
}

// Sets "section.key" of `c` to `v`, which holds the key's type (a preset's recipe, an
// Override). A name the field's options cannot hold is an error naming the key.
void set_field(RunConfig& c, const std::string& key, const FieldValue& v) {
  bool done = false;
  visit_sections(c, [&](const std::string& path, auto& s, const auto& fields) {
    for (const auto& f : fields) {
      if (done || path + "." + f.name != key) continue;
      try {
        done = f.set(s, v);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(key + ": " + e.what());
      }
    }
  });
  if (!done) throw std::logic_error("set_field: no key '" + key + "' of that type");
}

}  // namespace

std::string RunConfig::to_toml() const {
  std::ostringstream ss;
  ss << to_table(*this) << "\n";
  return ss.str();
}

RunConfig RunConfig::from_toml(const std::string& text, const std::string& origin) {
  toml::table t = parse_toml(text, origin);
  RunConfig c = from_table(t, origin);
  c.validate();
  return c;
}

namespace {

void diff_tables(const toml::table& a, const toml::table& b, const std::string& path,
                 std::vector<std::string>& out) {
  for (const auto& [k, v] : a) {
    const std::string key = path + (path.empty() ? "" : ".") + std::string(k.str());
    const toml::node* w = b.get(k.str());
    if (v.is_table() && w && w->is_table()) {
      diff_tables(*v.as_table(), *w->as_table(), key, out);
      continue;
    }
    std::ostringstream x, y;
    v.visit([&](auto&& n) { x << n; });
    if (w) w->visit([&](auto&& n) { y << n; });
    if (w && x.str() == y.str()) continue;
    out.push_back(key + ": " + x.str() + (w ? " vs " + y.str() : std::string()));
  }
}

}  // namespace

std::vector<std::string> RunConfig::diff(const RunConfig& other) const {
  std::vector<std::string> out;
  diff_tables(to_table(*this), to_table(other), "", out);
  return out;
}

std::vector<std::pair<std::string, std::string>> key_flags() {
  std::vector<std::pair<std::string, std::string>> out;
  const RunConfig defaults;
  visit_sections(defaults, [&](const std::string& path, const auto&, const auto& fields) {
    for (const auto& f : fields)
      if (f.flag) out.emplace_back(path + "." + f.name, f.flag);
  });
  return out;
}

namespace {

// Like TOML and fmt: nan (never "-nan"), inf, -inf.
std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

// A non-negative whole number held in a double, all its digits ("100000000", not "1e+08").
std::string whole(double v) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

// Examples per split of any task at most (ListOps's generator's bound, data/listops.h).
constexpr int64_t kMaxTaskExamples = data::ListOpsOptions::kMaxSequences;

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw std::invalid_argument(key + ": " + what);
}

}  // namespace

void RunConfig::validate() const {
  model.validate();
  // Each field's own check, [train] then [data], as declared.
  auto check_section = [](const std::string& path, const auto& section, const auto& fields) {
    for (const auto& f : fields)
      if (f.check)
        if (const std::string what = f.check(section); !what.empty())
          fail(path + "." + f.name, what);
  };
  check_section("train", train, train_fields());
  check_section("data", data, data_fields());
  const auto& d = data;
  if ((d.pathfinder_dashes != 0 || d.pathfinder_distractors != -1 ||
       d.pathfinder_resolution != 0) &&
      d.task != "pathfinder" && d.task != "pathx")
    fail(d.pathfinder_dashes != 0        ? "data.pathfinder_dashes"
         : d.pathfinder_distractors != -1 ? "data.pathfinder_distractors"
                                          : "data.pathfinder_resolution",
         "applies only to the pathfinder and pathx tasks, and data.task is '" + d.task + "'");
  if (d.retrieval_negative_neighbours < -1 ||
      d.retrieval_negative_neighbours > DataConfig::kMaxRetrievalNegativeNeighbours)
    fail("data.retrieval_negative_neighbours",
         "must be -1 (the default, 2), 0 (any president) or in [1, " +
             std::to_string(DataConfig::kMaxRetrievalNegativeNeighbours) + "], got " +
             std::to_string(d.retrieval_negative_neighbours));
  if (d.retrieval_negative_neighbours != -1 && d.task != "retrieval")
    fail("data.retrieval_negative_neighbours",
         "applies only to the retrieval task, and data.task is '" + d.task + "'");
  // A side whose image is longer than the model's positions would be cut when batched.
  if (d.pathfinder_resolution > 0 && model.max_len > 0 &&
      d.pathfinder_resolution * d.pathfinder_resolution > model.max_len)
    fail("data.pathfinder_resolution",
         std::to_string(d.pathfinder_resolution) + " x " +
             std::to_string(d.pathfinder_resolution) + " = " +
             std::to_string(d.pathfinder_resolution * d.pathfinder_resolution) +
             " pixels exceed model.max_len " + std::to_string(model.max_len) +
             "; give model.max_len " +
             std::to_string(d.pathfinder_resolution * d.pathfinder_resolution));
  if (!d.task.empty()) {
    const data::TaskInfo* info = nullptr;
    try {
      info = &data::task_info(d.task);
    } catch (const std::invalid_argument& e) {
      fail("data.task", e.what());
    }
    auto need = [&](const char* key, int64_t have, int64_t want, const char* why) {
      if (have != want)
        throw std::invalid_argument(std::string("model.") + key + ": task '" + d.task +
                                    "' needs " + std::to_string(want) + " (" + why + "), got " +
                                    std::to_string(have));
    };
    // Each split's count, bounded like ListOps's generator (a mistyped count would exhaust
    // memory or run for hours), and the task's own limits, named by their keys.
    const std::pair<const char*, int64_t> counts[] = {{"data.train_examples", d.train_examples},
                                                      {"data.valid_examples", d.valid_examples},
                                                      {"data.test_examples", d.test_examples}};
    for (const auto& [key, v] : counts)
      if (v > kMaxTaskExamples)
        fail(key, "must be in [0, " + std::to_string(kMaxTaskExamples) +
                      "] examples (0: the task's default), got " + std::to_string(v));
    if (d.task == "listops") {
      const data::ListOpsOptions defaults;
      const int64_t total = (d.train_examples > 0 ? d.train_examples : defaults.train) +
                            (d.valid_examples > 0 ? d.valid_examples : defaults.valid) +
                            (d.test_examples > 0 ? d.test_examples : defaults.test);
      const int64_t tokens = total * (defaults.max_length - 1);
      if (tokens > data::ListOpsOptions::kMaxTotalTokens)
        throw std::invalid_argument(
            "data.train_examples + data.valid_examples + data.test_examples: " +
            std::to_string(total) + " ListOps sequences of up to " +
            std::to_string(defaults.max_length - 1) + " tokens may hold " + std::to_string(tokens) +
            " tokens, more than the limit of " +
            std::to_string(data::ListOpsOptions::kMaxTotalTokens) + " (at most " +
            std::to_string(data::ListOpsOptions::kMaxTotalTokens / (defaults.max_length - 1)) +
            " sequences in all; 0 counts as the default, 96000 / 2000 / 2000)");
    }
    if (d.task == "image" && d.valid_examples >= 60000)
      fail("data.valid_examples",
           "must be below 60000 for task 'image' (the validation split is cut from "
           "Fashion-MNIST's 60000 training images), got " + std::to_string(d.valid_examples));
    need("vocab_size", model.vocab_size, info->vocab_size, "its token ids");
    need("n_classes", model.n_classes, info->n_classes, "its classes");
    need("cls_pair", model.cls_pair, info->pair, "1: pairs of sequences, 0: single sequences");
    if (d.tokenizer != "bytes")
      fail("data.tokenizer", "task '" + d.task + "' brings its own tokens; set 'bytes', got '" +
                                 d.tokenizer + "'");
    // BatchNorm's batch statistics would count the padding of variable-length examples.
    if (model.norm_type == "batch" &&
        (d.task == "listops" || d.task == "text" || d.task == "retrieval"))
      throw std::invalid_argument("model.norm_type: 'batch' would fold padding into the batch "
                                  "statistics of task '" + d.task +
                                  "' (examples of different lengths); use 'layer'");
    return;
  }
  if (model.n_classes > 0)
    throw std::invalid_argument("model.n_classes: a classification head needs a task "
                                "(data.task); language modelling uses the LM head");
  // Next-token prediction needs a model that cannot see the token it predicts.
  if (!model.causal) {
    // A preset made for classification names its language-model variant, if it has one.
    std::string hint = "set it to true";
    try {
      const models::ModelPreset& p = models::find_preset(model.preset);
      if (!p.lm_variant.empty())
        hint = "preset '" + p.name + "' is an encoder for classification; use " + p.lm_variant;
    } catch (const std::invalid_argument&) {
      // model.preset only records where a configuration came from; any name may be stored.
    }
    throw std::invalid_argument("model.causal: a language model (data.task empty) needs "
                                "model.causal = true (" + hint + ", or give a task: data.task)");
  }
  if (d.tokenizer == "bytes" && model.vocab_size != 256)
    throw std::invalid_argument("model.vocab_size: byte-level models (data.tokenizer = 'bytes') "
                                "need 256, got " + std::to_string(model.vocab_size) +
                                "; give a SentencePiece model as data.tokenizer");
}

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"bytes", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (b >= 1000 && u < 6) {
    b /= 1000;
    ++u;
  }
  std::ostringstream ss;
  ss.precision(b < 10 && u > 0 ? 2 : 3);
  if (u == 6 && b >= 1000)
    ss << std::scientific << b * 1e18 << " bytes";
  else
    ss << b << " " << units[u];
  return ss.str();
}

}  // namespace

// The activation term counts, per position of each of the batch_size sequences, the float32
// tensors a training step must keep for backward; it leaves out workspaces, dropout masks,
// the optimizer's temporaries and everything outside LibTorch, so it is a lower bound:
//   each block with an FFN: 4 D with norms (each norm's input and output), 2 D without (the
//     inputs of the mixer's and the FFN's first projections), + 2 d_ff (the FFN's hidden
//     layer before and after its activation);
//   each mixer: what its registry row's `activations` says (attention: Q, K, V and its
//     output, 4 D, plus n_heads L probabilities on the reference path; AIB: A, V and O, 3 D;
//     Extractor: X W_adj, ext and its output, 3 D; ESMLP, a whole block without FFN: 2 D
//     (norm output, residual input) + 3 d_ff (projection, CES output, ReLU output));
//   the embeddings and the final norm: 2 D; a language model's logits and their gradient:
//     2 V.
// The positions are model.max_len (at most the task's longest sequence for a task), twice
// for pair tasks (two towers).
RunConfig::MemoryEstimate RunConfig::estimate_training_memory() const {
  const auto& m = model;
  const double D = static_cast<double>(m.d_model), F = static_cast<double>(m.d_ff);
  double L = static_cast<double>(m.max_len);
  if (!data.task.empty()) {
    try {
      L = std::min(L, static_cast<double>(data::task_info(data.task).max_len));
    } catch (const std::invalid_argument&) {
    }
  }
  double per_position = 2 * D;  // embeddings, final norm
  double workspace = 0;          // per layer, whatever the batch
  if (m.n_classes == 0) per_position += 2 * static_cast<double>(m.vocab_size);
  for (size_t j = 0; j < m.mixers.size(); ++j) {
    const models::MixerSpec& spec = models::find_mixer(m.mixers[j]);
    double per_layer = spec.activations ? spec.activations(m, L) : 3 * D;
    if (spec.has_ffn) per_layer += (m.norm ? 4 : 2) * D + 2 * F;
    per_position += per_layer * static_cast<double>(m.layers_of(j));
    if (spec.workspace) workspace += spec.workspace(m, L) * static_cast<double>(m.layers_of(j));
  }
  const double towers = m.cls_pair ? 2 : 1;
  MemoryEstimate e;
  e.parameters = m.num_parameters_approx() * 4 * 4;
  e.activations = (static_cast<double>(train.batch_size) * L * towers * per_position + workspace) * 4;
  return e;
}

void RunConfig::check_resources(bool training) const {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (train.threads > 4 * hw)
    fail("train.threads",
         "must be at most " + std::to_string(4 * hw) + " (4x this machine's " +
             std::to_string(hw) + " hardware threads; 0: all of them), got " +
             std::to_string(train.threads));
  // A stored configuration is evaluated on the device its command asks for, not this key's.
  if (training) util::require_device(train.device, "train.device");
  const double physical = static_cast<double>(util::physical_memory_bytes());
  if (!training) {
    const double weights = model.num_parameters_approx() * 4;
    if (physical > 0 && !(weights <= physical))
      throw std::invalid_argument(
          "the model's " + number(model.num_parameters_approx()) + " parameters (model.n_layers " +
          std::to_string(model.n_layers) + ", model.d_model " + std::to_string(model.d_model) +
          ", model.d_ff " + std::to_string(model.d_ff) + ", model.vocab_size " +
          std::to_string(model.vocab_size) + ", " + "model.max_len " +
          std::to_string(model.max_len) + ") need " + human_bytes(weights) +
          ", more than this machine's " + human_bytes(physical) + " of physical memory");
    return;
  }
  // A generated task holds its splits in memory: int32 tokens, max_len per example and tower.
  if ((data.task == "pathfinder" || data.task == "pathx" || data.task == "listops") &&
      physical > 0) {
    const data::TaskInfo& info = data::task_info(data.task);
    const double examples = static_cast<double>(data.train_examples) +
                            static_cast<double>(data.valid_examples) +
                            static_cast<double>(data.test_examples);
    const double bytes = examples * static_cast<double>(info.max_len) * (info.pair ? 2 : 1) * 4;
    if (!(bytes <= physical))
      throw std::invalid_argument(
          "data.train_examples + data.valid_examples + data.test_examples: " + whole(examples) +
          " examples of task '" + data.task + "' (up to " + std::to_string(info.max_len) +
          " tokens each) need up to " + human_bytes(bytes) + ", more than this machine's " +
          human_bytes(physical) + " of physical memory");
  }
  const MemoryEstimate e = estimate_training_memory();
  if (physical > 0 && !(e.total() <= physical)) {
    const auto& m = model;
    std::ostringstream ss;
    ss << "one training step needs at least " << human_bytes(e.total())
       << " of memory, more than this machine's " << human_bytes(physical)
       << " of physical memory: activations of " << "train.batch_size "
       << train.batch_size << " x " << "model.max_len " << m.max_len
       << " positions through model.n_layers " << m.n_layers << " layers of model.d_model "
       << m.d_model << " / model.d_ff " << m.d_ff << ": " << human_bytes(e.activations) << "; "
       << number(m.num_parameters_approx())
       << " parameters (model.n_layers, model.d_model, model.d_ff, model.vocab_size "
       << m.vocab_size << ", model.max_len) with gradients and AdamW moments: "
       << human_bytes(e.parameters) << ". Lower "
       << (e.activations >= e.parameters ? "train.batch_size, model.max_len or model.n_layers"
                                         : "model.n_layers, model.d_model or model.max_len");
    throw std::invalid_argument(ss.str());
  }
}

namespace {

// A configuration file is a few KB (to_toml writes ~2 KB); anything near this is a mistake.
constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;

// The text of a --config file: a regular file (a FIFO or device is refused without blocking,
// as data files are), at most kMaxConfigBytes.
std::string read_config_file(const std::string& path) {
  auto too_big = [&](uint64_t bytes) {
    return std::runtime_error("config file '" + path + "' (`config_path`) is " +
                              std::to_string(bytes) +
                              " bytes; a configuration is at most 1 MiB (1048576 bytes)");
  };
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);  // stat only: a FIFO is never opened here
  if (!ec && std::filesystem::is_regular_file(st)) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxConfigBytes) throw too_big(size);
  }
  std::string text = data::read_regular_file(path, "config file (`config_path`)");
  if (text.size() > kMaxConfigBytes) throw too_big(text.size());  // grew while being read
  return text;
}

// True if `v` has the shape of a TOML decimal number: [+-] digits [. digits] [e [+-] digits]
// (underscores between digits allowed). Such a value that TOML does not parse is out of range.
bool looks_numeric(const std::string& v, bool* integral) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < v.size() && (std::isdigit(static_cast<unsigned char>(v[i])) ||
                            (v[i] == '_' && i > start)))
      ++i;
    return i > start;
  };
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
  if (!digits()) return false;
  *integral = true;
  if (i < v.size() && v[i] == '.') {
    ++i;
    *integral = false;
    if (!digits()) return false;
  }
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    *integral = false;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == v.size();
}

// The message for an override value shaped like a number that TOML could not represent.
std::string out_of_range(const std::string& key, const std::string& value, bool integral) {
  return "'" + key + "': " + value + " is out of the range of a 64-bit " +
         (integral ? "integer (at most 9223372036854775807 in magnitude)" : "float");
}

// A configuration's keys and their types: the table of the defaults.
const toml::table& key_types() {
  static const toml::table t = to_table(RunConfig());
  return t;
}

// An integer given for a number becomes the number; any other difference is an error.
FieldValue as_type(FieldValue v, const FieldValue& want, const std::string& key,
                   const std::string& origin) {
  if (v.index() == want.index()) return v;
  if (want.index() == 1 && v.index() == 0) return static_cast<double>(std::get<int64_t>(v));
  throw std::runtime_error(origin + ": '" + key + "' must be " + util::field_type_name(want) +
                           ", got " + util::field_type_name(v));
}

}  // namespace

Override::Override(std::string key_in, FieldValue value_in, std::string origin_in)
    : key(std::move(key_in)), origin(std::move(origin_in)) {
  if (origin.empty()) origin = key;
  value = as_type(std::move(value_in), key_type(key_types(), key, origin), key, origin);
}

Override::Override(const std::string& text) : origin("override '" + text + "'") {
  const auto eq = text.find('=');
  const auto dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw std::runtime_error(origin + ": expected section.key=value");
  key = text.substr(0, eq);
  const std::string v = text.substr(eq + 1);
  // "v = " + value is parsed as a TOML document: a line break would start a second line,
  // which is dropped (a value silently cut short) or read as another key.
  if (v.find_first_of(std::string("\n\r\0", 3)) != std::string::npos)
    throw std::runtime_error(origin + ": the value contains a line break or NUL byte; " +
                             "give one value per override (section.key=value)");
  if (key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
    throw std::runtime_error(origin + ": expected section.key=value");
  const FieldValue want = key_type(key_types(), key, origin);
  toml::table doc;
  try {
    const std::string line = "v = " + v;
    check_toml_text(line, origin);
    doc = toml::parse(line);
  } catch (const toml::parse_error&) {
    // A number TOML cannot hold (1e400, 2^63 and more) is out of range, except that a float
    // key takes a decimal integer beyond int64 (99999999999999999999 is 1e20). Anything
    // else TOML refuses (a bare word, 007) stays a string, for the type check to report.
    bool integral = false;
    if (looks_numeric(v, &integral)) {
      std::string plain;
      for (const char ch : v)
        if (ch != '_') plain += ch;
      errno = 0;
      const double x = std::strtod(plain.c_str(), nullptr);
      const bool overflow = errno == ERANGE && std::isinf(x);
      const bool beyond_int64 = integral && !(std::fabs(x) < 9223372036854775808.0);
      const bool float_key = want.index() == 1;
      if (overflow || (beyond_int64 && !float_key))
        throw std::runtime_error(origin + ": " + out_of_range(key, v, integral && !float_key));
      if (beyond_int64) doc = toml::table{{"v", x}};
    }
    if (!doc.contains("v")) doc = toml::table{{"v", v}};  // a bare word is a string
  }
  value = to_value(*doc.get("v"), want, key, origin);
}

RunConfig resolve_config(const std::string& config_path, const std::vector<Override>& overrides,
                         const RunConfig* base_in) {
  toml::table file;
  const std::string file_origin = "config file '" + config_path + "'";
  if (!config_path.empty()) {
    file = parse_toml(read_config_file(config_path), file_origin);
  }
  // The preset, size and task the file and then the overrides name decide the base
  // configuration.
  std::string family = file["model"]["preset"].value_or(models::ModelConfig().preset);
  std::string size = file["model"]["size"].value_or(std::string());
  std::string task = file["data"]["task"].value_or(std::string());
  for (const auto& o : overrides) {
    if (o.key == "model.preset") family = std::get<std::string>(o.value);
    if (o.key == "model.size") size = std::get<std::string>(o.value);
    if (o.key == "data.task") task = std::get<std::string>(o.value);
  }
  RunConfig base;
  if (base_in) {
    base = *base_in;
  } else {
    try {
      if (!task.empty()) {
        base = make_task_config(family, task, size.empty() ? "cpu" : size);
      } else {
        base.model = models::make_model_config(family, size.empty() ? "mini" : size);
        // A preset's own optimiser for language modelling (e.g. the Extractor paper's).
        for (const auto& [key, value] : models::find_preset(family).lm_train)
          set_field(base, key, value);
      }
    } catch (const std::invalid_argument& e) {
      // Name the key (and flag) the unknown name came from.
      const std::string what = e.what();
      const char* key = what.rfind("unknown model preset", 0) == 0 ? "model.preset"
                        : what.rfind("unknown model size", 0) == 0 ||
                                what.rfind("unknown task size", 0) == 0
                            ? "model.size"
                        : what.rfind("unknown task", 0) == 0 ? "data.task"
                                                             : nullptr;
      throw std::runtime_error(key ? std::string(key) + ": " + what : what);
    }
  }
  RunConfig c = base;
  if (!config_path.empty()) {
    toml::table t = to_table(base);
    merge_file(t, file, "", file_origin);
    c = from_table(t, file_origin);
  }
  for (const auto& o : overrides) {
    try {
      set_field(c, o.key, o.value);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(o.origin + ": " + e.what());
    }
  }
  // data.dir empty means the lookup through SEQMIX_DATA_DIR; set but empty, it is a mistake
  // (an unexpanded shell variable), not "unset".
  if (const char* env = std::getenv("SEQMIX_DATA_DIR"); c.data.dir.empty() && env && !*env)
    throw std::runtime_error(
        "SEQMIX_DATA_DIR is set but empty (it names the folder scripts/setup.sh fills, used when "
        "data.dir is not given); set it to that folder, or unset it");
  // A pattern given here (not a preset's) repeats over the layers: entries past n_layers would
  // never be used, and a huge array would be stored in every config.toml and checkpoint.
  bool mixers_given = !!file["model"]["mixers"];
  for (const auto& o : overrides) mixers_given = mixers_given || o.key == "model.mixers";
  if (mixers_given && c.model.n_layers >= 1 &&
      static_cast<int64_t>(c.model.mixers.size()) > c.model.n_layers)
    throw std::runtime_error(
        "invalid configuration: model.mixers has " + std::to_string(c.model.mixers.size()) +
        " entries but model.n_layers is " + std::to_string(c.model.n_layers) +
        ": the pattern repeats over the layers, so it can have at most n_layers entries");
  try {
    c.validate();
    c.check_resources();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("invalid configuration: ") + e.what());
  }
  return c;
}

}  // namespace seqmix::train
