#include "seqmix/train/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <type_traits>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/listops.h"
#include "seqmix/data/tasks.h"
#include "seqmix/models/presets.h"
#include "seqmix/train/task_presets.h"
#include "seqmix/util/memory.h"

namespace seqmix::train {

namespace {

toml::table to_table(const RunConfig& c) {
  const auto& m = c.model;
  toml::array mixers;
  for (const auto& s : m.mixers) mixers.push_back(s);
  toml::table model{{"preset", m.preset},
                    {"size", m.size},
                    {"vocab_size", m.vocab_size},
                    {"d_model", m.d_model},
                    {"n_layers", m.n_layers},
                    {"n_heads", m.n_heads},
                    {"d_ff", m.d_ff},
                    {"max_len", m.max_len},
                    {"mixers", mixers},
                    {"causal", m.causal},
                    {"activation", m.activation},
                    {"aib_weights", m.aib_weights},
                    {"aib_bias", m.aib_bias},
                    {"aib_impl", m.aib_impl},
                    {"pre_norm", m.pre_norm},
                    {"dropout", m.dropout},
                    {"tie_embeddings", m.tie_embeddings},
                    {"norm", m.norm},
                    {"bias", m.bias},
                    {"extractor_adjust", m.extractor_adjust},
                    {"extractor_out_proj", m.extractor_out_proj},
                    {"extractor_impl", m.extractor_impl},
                    {"norm_type", m.norm_type},
                    {"ces_gate", m.ces_gate},
                    {"ces_shortcut", m.ces_shortcut},
                    {"ces_normalize", m.ces_normalize},
                    {"ces_r_min", m.ces_r_min},
                    {"ces_r_max", m.ces_r_max},
                    {"ces_max_phase", m.ces_max_phase},
                    {"ces_max_lambda", m.ces_max_lambda},
                    {"ces_impl", m.ces_impl},
                    {"attention_impl", m.attention_impl},
                    {"n_classes", m.n_classes},
                    {"cls_pair", m.cls_pair}};
  const auto& d = c.data;
  toml::table data{{"source", d.source},
                   {"dir", d.dir},
                   {"eval_split", d.eval_split},
                   {"tokenizer", d.tokenizer},
                   {"task", d.task},
                   {"task_seed", d.task_seed},
                   {"train_examples", d.train_examples},
                   {"valid_examples", d.valid_examples},
                   {"test_examples", d.test_examples},
                   {"pad_to_multiple", d.pad_to_multiple}};
  const auto& t = c.train;
  toml::table train{{"batch_size", t.batch_size},
                    {"max_steps", t.max_steps},
                    {"lr", t.lr},
                    {"min_lr_ratio", t.min_lr_ratio},
                    {"warmup_steps", t.warmup_steps},
                    {"schedule", t.schedule},
                    {"decay_steps", t.decay_steps},
                    {"weight_decay", t.weight_decay},
                    {"beta1", t.beta1},
                    {"beta2", t.beta2},
                    {"eps", t.eps},
                    {"grad_clip", t.grad_clip},
                    {"eval_interval", t.eval_interval},
                    {"eval_max_bytes", t.eval_max_bytes},
                    {"checkpoint_interval", t.checkpoint_interval},
                    {"log_interval", t.log_interval},
                    {"seed", t.seed},
                    {"threads", t.threads},
                    {"nonfinite", t.nonfinite}};
  return toml::table{{"model", model}, {"data", data}, {"train", train}};
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
    default:
      return "a value";
  }
}

std::string known_keys(const toml::table& t) {
  std::string s;
  for (const auto& [k, v] : t) s += (s.empty() ? "" : ", ") + std::string(k.str());
  return s;
}

// Sets base[section][key] = value after checking that the key exists and the type matches
// (an integer is accepted where a number is expected).
void assign(toml::table& base, const std::string& section, const std::string& key,
            const toml::node& value, const std::string& origin) {
  toml::table* sec = base[section].as_table();
  if (!sec)
    throw std::runtime_error(origin + ": unknown section '" + section + "' (expected " +
                             known_keys(base) + ")");
  toml::node* old = sec->get(key);
  if (!old)
    throw std::runtime_error(origin + ": unknown key '" + section + "." + key +
                             "' (known: " + known_keys(*sec) + ")");
  const auto want = old->type(), got = value.type();
  if (want == toml::node_type::floating_point && got == toml::node_type::integer) {
    sec->insert_or_assign(key, static_cast<double>(*value.value<int64_t>()));
    return;
  }
  if (want != got)
    throw std::runtime_error(origin + ": '" + section + "." + key + "' must be " + type_name(want) +
                             ", got " + type_name(got));
  if (want == toml::node_type::array) {
    for (const auto& el : *value.as_array())
      if (!el.is_string())
        throw std::runtime_error(origin + ": '" + section + "." + key +
                                 "' must be an array of strings");
  }
  sec->insert_or_assign(key, value);
}

void merge_file(toml::table& base, const toml::table& file, const std::string& origin) {
  for (const auto& [sk, sv] : file) {
    const std::string section(sk.str());
    const toml::table* st = sv.as_table();
    if (!st)
      throw std::runtime_error(origin + ": '" + section +
                               "' must be a table such as [model], [data] or [train]");
    for (const auto& [k, v] : *st) assign(base, section, std::string(k.str()), v, origin);
  }
}

template <typename T>
T get(const toml::table& t, const char* section, const char* key, const std::string& origin) {
  // Integers exactly: toml++'s converting value<int64_t>() casts a float to int64 before
  // checking its range, which is undefined for 1e30 (found by fuzz/fuzz_config).
  std::optional<T> v;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (t[section][key].is_floating_point())
      throw std::runtime_error(origin + ": '" + std::string(section) + "." + key +
                               "' must be an integer, got a floating-point number");
    v = t[section][key].value_exact<T>();
  } else {
    v = t[section][key].value<T>();
  }
  if (!v)
    throw std::runtime_error(origin + ": missing or mistyped key '" + std::string(section) + "." +
                             key + "'");
  return *v;
}

// Keys added after the first release: absent (an older config or checkpoint) means the
// value they had before the key existed; present but mistyped is still an error.
template <typename T>
T get_or(const toml::table& t, const char* section, const char* key, T fallback,
         const std::string& origin) {
  if (!t[section][key]) return fallback;
  return get<T>(t, section, key, origin);
}

RunConfig from_table(const toml::table& t, const std::string& origin) {
  RunConfig c;
  auto& m = c.model;
  m.preset = get<std::string>(t, "model", "preset", origin);
  m.size = get<std::string>(t, "model", "size", origin);
  m.vocab_size = get<int64_t>(t, "model", "vocab_size", origin);
  m.d_model = get<int64_t>(t, "model", "d_model", origin);
  m.n_layers = get<int64_t>(t, "model", "n_layers", origin);
  m.n_heads = get<int64_t>(t, "model", "n_heads", origin);
  m.d_ff = get<int64_t>(t, "model", "d_ff", origin);
  m.max_len = get<int64_t>(t, "model", "max_len", origin);
  m.mixers.clear();
  if (const toml::array* arr = t["model"]["mixers"].as_array())
    for (const auto& el : *arr) m.mixers.push_back(el.value_or(std::string()));
  m.causal = get<bool>(t, "model", "causal", origin);
  m.activation = get<std::string>(t, "model", "activation", origin);
  m.aib_weights = get<std::string>(t, "model", "aib_weights", origin);
  m.aib_bias = get<bool>(t, "model", "aib_bias", origin);
  m.aib_impl = get<std::string>(t, "model", "aib_impl", origin);
  m.pre_norm = get<bool>(t, "model", "pre_norm", origin);
  m.dropout = get<double>(t, "model", "dropout", origin);
  m.tie_embeddings = get<bool>(t, "model", "tie_embeddings", origin);
  m.norm = get_or<bool>(t, "model", "norm", true, origin);
  m.bias = get_or<bool>(t, "model", "bias", true, origin);
  m.extractor_adjust = get_or<bool>(t, "model", "extractor_adjust", true, origin);
  m.extractor_out_proj = get_or<bool>(t, "model", "extractor_out_proj", true, origin);
  m.extractor_impl = get_or<std::string>(t, "model", "extractor_impl", "fft", origin);
  // Added with the ETSMLP models: older configs and checkpoints lack them.
  const models::ModelConfig d;
  m.norm_type = get_or<std::string>(t, "model", "norm_type", d.norm_type, origin);
  m.ces_gate = get_or<bool>(t, "model", "ces_gate", d.ces_gate, origin);
  m.ces_shortcut = get_or<std::string>(t, "model", "ces_shortcut", d.ces_shortcut, origin);
  m.ces_normalize = get_or<bool>(t, "model", "ces_normalize", d.ces_normalize, origin);
  m.ces_r_min = get_or<double>(t, "model", "ces_r_min", d.ces_r_min, origin);
  m.ces_r_max = get_or<double>(t, "model", "ces_r_max", d.ces_r_max, origin);
  m.ces_max_phase = get_or<double>(t, "model", "ces_max_phase", d.ces_max_phase, origin);
  m.ces_max_lambda = get_or<double>(t, "model", "ces_max_lambda", d.ces_max_lambda, origin);
  m.ces_impl = get_or<std::string>(t, "model", "ces_impl", d.ces_impl, origin);
  m.attention_impl = get_or<std::string>(t, "model", "attention_impl", d.attention_impl, origin);
  m.n_classes = get_or<int64_t>(t, "model", "n_classes", d.n_classes, origin);
  m.cls_pair = get_or<bool>(t, "model", "cls_pair", d.cls_pair, origin);
  c.data.source = get<std::string>(t, "data", "source", origin);
  c.data.dir = get<std::string>(t, "data", "dir", origin);
  c.data.eval_split = get<std::string>(t, "data", "eval_split", origin);
  c.data.tokenizer = get_or<std::string>(t, "data", "tokenizer", "bytes", origin);
  // Added with the classification tasks.
  c.data.task = get_or<std::string>(t, "data", "task", "", origin);
  c.data.task_seed = get_or<int64_t>(t, "data", "task_seed", 0, origin);
  c.data.train_examples = get_or<int64_t>(t, "data", "train_examples", 0, origin);
  c.data.valid_examples = get_or<int64_t>(t, "data", "valid_examples", 0, origin);
  c.data.test_examples = get_or<int64_t>(t, "data", "test_examples", 0, origin);
  c.data.pad_to_multiple = get_or<int64_t>(t, "data", "pad_to_multiple", 64, origin);
  auto& r = c.train;
  r.batch_size = get<int64_t>(t, "train", "batch_size", origin);
  r.max_steps = get<int64_t>(t, "train", "max_steps", origin);
  r.lr = get<double>(t, "train", "lr", origin);
  r.min_lr_ratio = get<double>(t, "train", "min_lr_ratio", origin);
  r.warmup_steps = get<int64_t>(t, "train", "warmup_steps", origin);
  r.schedule = get<std::string>(t, "train", "schedule", origin);
  // Added with resumable horizons: absent means the schedule ended at max_steps.
  r.decay_steps = get_or<int64_t>(t, "train", "decay_steps", 0, origin);
  r.weight_decay = get<double>(t, "train", "weight_decay", origin);
  r.beta1 = get<double>(t, "train", "beta1", origin);
  r.beta2 = get<double>(t, "train", "beta2", origin);
  r.eps = get<double>(t, "train", "eps", origin);
  r.grad_clip = get<double>(t, "train", "grad_clip", origin);
  r.eval_interval = get<int64_t>(t, "train", "eval_interval", origin);
  r.eval_max_bytes = get<int64_t>(t, "train", "eval_max_bytes", origin);
  r.checkpoint_interval = get<int64_t>(t, "train", "checkpoint_interval", origin);
  r.log_interval = get<int64_t>(t, "train", "log_interval", origin);
  r.seed = get<int64_t>(t, "train", "seed", origin);
  r.threads = get<int64_t>(t, "train", "threads", origin);
  r.nonfinite = get_or<std::string>(t, "train", "nonfinite", "stop", origin);
  return c;
}

toml::table parse_toml(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream ss;
    ss << origin << ": not valid TOML at line " << e.source().begin.line << ": " << e.description();
    throw std::runtime_error(ss.str());
  }
}

}  // namespace

std::string RunConfig::to_toml() const {
  std::ostringstream ss;
  ss << to_table(*this) << "\n";
  return ss.str();
}

RunConfig RunConfig::from_toml(const std::string& text, const std::string& origin) {
  RunConfig c = from_table(parse_toml(text, origin), origin);
  c.validate();
  return c;
}

std::vector<std::string> RunConfig::diff(const RunConfig& other) const {
  const toml::table a = to_table(*this), b = to_table(other);
  std::vector<std::string> out;
  for (const auto& [sk, sv] : a) {
    for (const auto& [k, v] : *sv.as_table()) {
      const toml::node* w = b[sk][k].node();
      std::ostringstream x, y;
      v.visit([&](auto&& n) { x << n; });
      if (w) w->visit([&](auto&& n) { y << n; });
      if (w && x.str() == y.str()) continue;
      out.push_back(std::string(sk.str()) + "." + std::string(k.str()) + ": " + x.str() +
                    (w ? " vs " + y.str() : std::string()));
    }
  }
  return out;
}

std::string describe_key(const std::string& key) {
  static const std::map<std::string, std::string> flags = {
      {"train.max_steps", "--max-steps"}, {"train.seed", "--seed"},
      {"train.batch_size", "--batch-size"}, {"train.lr", "--lr"},
      {"train.threads", "--threads"},       {"model.max_len", "--max-len"},
      {"data.source", "--data"},            {"data.dir", "--data-dir"},
      {"data.task", "--task"},              {"model.preset", "--model"},
      {"model.size", "--size"},             {"data.tokenizer", "--tokenizer"},
      {"model.aib_impl", "--aib-impl"}};
  const auto it = flags.find(key);
  return it == flags.end() ? key : key + " (" + it->second + ")";
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
  throw std::invalid_argument(describe_key(key) + ": " + what);
}

void at_least(const std::string& key, int64_t v, int64_t lo, const std::string& note = "") {
  if (v < lo)
    fail(key, "must be >= " + std::to_string(lo) + note + ", got " + std::to_string(v));
}

// lo <= v (< or <=) hi, finite; NaN fails every comparison.
void in_range(const std::string& key, double v, double lo, double hi, bool hi_open,
              const std::string& note = "") {
  if (!(std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi)))
    fail(key, "must be a number in [" + number(lo) + ", " + number(hi) + (hi_open ? ")" : "]") +
                  note + ", got " + number(v));
}

void finite_at_least(const std::string& key, double v, double lo, bool open,
                     const std::string& note = "") {
  if (!(std::isfinite(v) && (open ? v > lo : v >= lo)))
    fail(key, "must be a finite number " + std::string(open ? "> " : ">= ") + number(lo) + note +
                  ", got " + number(v));
}

// Paths reach messages, JSON and plot scripts: no control characters (newline, escape, ...).
void plain_text(const std::string& key, const std::string& v) {
  for (const unsigned char ch : v)
    if (ch < 0x20 || ch == 0x7f)
      fail(key, "must not contain control characters (newline, tab, escape, ...)");
}

}  // namespace

void RunConfig::validate() const {
  try {
    model.validate();
  } catch (const std::invalid_argument& e) {
    // "model.key: ..." -> "model.key (--flag): ..." where the key has a flag.
    const std::string what = e.what();
    const auto colon = what.find(": ");
    if (what.rfind("model.", 0) == 0 && colon != std::string::npos)
      throw std::invalid_argument(describe_key(what.substr(0, colon)) + what.substr(colon));
    throw;
  }
  const auto& t = train;
  at_least("train.batch_size", t.batch_size, 1);
  at_least("train.max_steps", t.max_steps, 0);
  finite_at_least("train.lr", t.lr, 0, true);
  in_range("train.min_lr_ratio", t.min_lr_ratio, 0, 1, false, " (final lr = lr x this)");
  at_least("train.warmup_steps", t.warmup_steps, 0);
  at_least("train.decay_steps", t.decay_steps, 0, " (0: train.max_steps)");
  if (t.schedule != "cosine" && t.schedule != "linear" && t.schedule != "constant")
    fail("train.schedule", "must be cosine, linear or constant, got '" + t.schedule + "'");
  finite_at_least("train.weight_decay", t.weight_decay, 0, false);
  in_range("train.beta1", t.beta1, 0, 1, true);
  in_range("train.beta2", t.beta2, 0, 1, true);
  finite_at_least("train.eps", t.eps, 0, true);
  finite_at_least("train.grad_clip", t.grad_clip, 0, false, " (0: no clipping)");
  at_least("train.eval_interval", t.eval_interval, 0, " (0: only at the end)");
  at_least("train.eval_max_bytes", t.eval_max_bytes, 0, " (0: the whole split)");
  at_least("train.checkpoint_interval", t.checkpoint_interval, 0, " (0: only at the end)");
  at_least("train.log_interval", t.log_interval, 1);
  at_least("train.seed", t.seed, 0);
  at_least("train.threads", t.threads, 0, " (0: all hardware threads)");
  if (t.nonfinite != "stop" && t.nonfinite != "skip")
    fail("train.nonfinite", "must be stop or skip, got '" + t.nonfinite + "'");
  const auto& d = data;
  if (d.source.empty())
    fail("data.source", "must name a corpus (sotu, moby-dick) or a text file or folder");
  plain_text("data.source", d.source);
  plain_text("data.dir", d.dir);
  plain_text("data.tokenizer", d.tokenizer);
  if (d.eval_split != "valid" && d.eval_split != "test")
    fail("data.eval_split", "must be valid or test, got '" + d.eval_split + "'");
  if (d.tokenizer.empty()) fail("data.tokenizer", "must be 'bytes' or a SentencePiece model path");
  at_least("data.pad_to_multiple", d.pad_to_multiple, 1);
  at_least("data.task_seed", d.task_seed, 0);
  at_least("data.train_examples", d.train_examples, 0, " (0: the task's default)");
  at_least("data.valid_examples", d.valid_examples, 0, " (0: the task's default)");
  at_least("data.test_examples", d.test_examples, 0, " (0: the task's default)");
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
                                "(data.task, --task); language modelling uses the LM head");
  // Next-token prediction needs a model that cannot see the token it predicts.
  if (!model.causal) {
    const bool encoder_preset = model.preset == "etsmlp" || model.preset == "etsmlp-gate";
    throw std::invalid_argument(
        "model.causal: a language model (data.task empty) needs model.causal = true (" +
        (encoder_preset ? "preset '" + model.preset + "' is an encoder for classification; use " +
                              model.preset + "-lm"
                        : std::string("set it to true")) +
        ", or give a task with --task)");
  }
  if (d.tokenizer == "bytes" && model.vocab_size != 256)
    throw std::invalid_argument("model.vocab_size: byte-level models (data.tokenizer = 'bytes') "
                                "need 256, got " + std::to_string(model.vocab_size) +
                                "; give a SentencePiece model as data.tokenizer (--tokenizer)");
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
//     inputs of the mixer's and the FFN's first projections), + the mixer's own tensors
//     (attention: Q, K, V and its output, 4 D; AIB: A, V and O, 3 D; Extractor: X W_adj, ext
//     and its output, 3 D) + 2 d_ff (the FFN's hidden layer before and after its
//     activation);
//   each ESMLP block: 2 D (norm output, residual input) + 3 d_ff (projection, CES output,
//     ReLU output);
//   an attention mixer on the reference path (model.attention_impl = reference): its
//     [L, L] probabilities per head (softmax's backward needs them), n_heads L;
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
  if (m.n_classes == 0) per_position += 2 * static_cast<double>(m.vocab_size);
  const auto M = static_cast<int64_t>(m.mixers.size());
  for (int64_t j = 0; j < M; ++j) {
    const double layers =
        static_cast<double>(m.n_layers / M + (j < m.n_layers % M ? 1 : 0));
    const std::string& kind = m.mixers[static_cast<size_t>(j)];
    double per_layer = 2 * D + 3 * F;  // etsmlp
    if (kind != "etsmlp")
      per_layer = (m.norm ? 4 : 2) * D + (kind == "attention" ? 4 : 3) * D + 2 * F;
    if (kind == "attention" && m.attention_impl == "reference")
      per_layer += static_cast<double>(m.n_heads) * L;
    per_position += per_layer * layers;
  }
  const double towers = m.cls_pair ? 2 : 1;
  MemoryEstimate e;
  e.parameters = m.num_parameters_approx() * 4 * 4;
  e.activations = static_cast<double>(train.batch_size) * L * towers * per_position * 4;
  return e;
}

void RunConfig::check_resources(bool training) const {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (train.threads > 4 * hw)
    fail("train.threads",
         "must be at most " + std::to_string(4 * hw) + " (4x this machine's " +
             std::to_string(hw) + " hardware threads; 0: all of them), got " +
             std::to_string(train.threads));
  const double physical = static_cast<double>(util::physical_memory_bytes());
  if (!training) {
    const double weights = model.num_parameters_approx() * 4;
    if (physical > 0 && !(weights <= physical))
      throw std::invalid_argument(
          "the model's " + number(model.num_parameters_approx()) + " parameters (model.n_layers " +
          std::to_string(model.n_layers) + ", model.d_model " + std::to_string(model.d_model) +
          ", model.d_ff " + std::to_string(model.d_ff) + ", model.vocab_size " +
          std::to_string(model.vocab_size) + ", " + describe_key("model.max_len") + " " +
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
       << " of physical memory: activations of " << describe_key("train.batch_size") << " "
       << train.batch_size << " x " << describe_key("model.max_len") << " " << m.max_len
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
    return std::runtime_error("config file '" + path + "' (--config) is " +
                              std::to_string(bytes) +
                              " bytes; a configuration is at most 1 MiB (1048576 bytes)");
  };
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);  // stat only: a FIFO is never opened here
  if (!ec && std::filesystem::is_regular_file(st)) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxConfigBytes) throw too_big(size);
  }
  std::string text = data::read_regular_file(path, "config file (--config)");
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

}  // namespace

RunConfig resolve_config(const std::string& config_path, const std::vector<std::string>& overrides,
                         const RunConfig* base_in) {
  toml::table file;
  if (!config_path.empty())
    file = parse_toml(read_config_file(config_path), "config file '" + config_path + "'");
  // Parse the overrides first: the preset they name decides the base configuration.
  std::vector<std::tuple<std::string, std::string, toml::table, std::string>> parsed;
  std::string family = file["model"]["preset"].value_or(std::string("weird-net"));
  std::string size = file["model"]["size"].value_or(std::string());
  std::string task = file["data"]["task"].value_or(std::string());
  for (const auto& o : overrides) {
    const std::string origin = "override '" + o + "'";
    const auto eq = o.find('=');
    const auto dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      throw std::runtime_error(origin + ": expected section.key=value");
    const std::string section = o.substr(0, dot), key = o.substr(dot + 1, eq - dot - 1);
    const std::string value = o.substr(eq + 1);
    toml::table v;
    try {
      v = toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      // A number TOML cannot hold (1e400, 2^63 and more) is out of range, except that a float
      // key takes a decimal integer beyond int64 (99999999999999999999 is 1e20). Anything
      // else TOML refuses (a bare word, 007) stays a string, for the type check to report.
      bool integral = false;
      const toml::table probe = to_table(RunConfig());
      if (looks_numeric(value, &integral) && probe[section][key]) {
        std::string plain;
        for (const char ch : value)
          if (ch != '_') plain += ch;
        errno = 0;
        const double x = std::strtod(plain.c_str(), nullptr);
        const bool overflow = errno == ERANGE && std::isinf(x);
        const bool beyond_int64 = integral && !(std::fabs(x) < 9223372036854775808.0);
        const bool float_key = probe[section][key].is_floating_point();
        const std::string full = section + "." + key;
        if (overflow || (beyond_int64 && !float_key))
          throw std::runtime_error(origin + ": " +
                                   out_of_range(full, value, integral && !float_key));
        if (beyond_int64) v = toml::table{{"v", x}};
      }
      if (!v.contains("v")) v = toml::table{{"v", value}};  // a bare word is a string
    }
    if (section == "model" && key == "preset") family = v["v"].value_or(value);
    if (section == "model" && key == "size") size = v["v"].value_or(value);
    if (section == "data" && key == "task") task = v["v"].value_or(value);
    parsed.emplace_back(section, key, std::move(v), origin);
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
      }
      if (task.empty() && (family == "extractor-transformer" || family == "transformer-plain")) {
        // The Extractor paper's training (Table 1): PyTorch's AdamW defaults with lr 1e-3
        // (beta2 0.999, weight decay 0.01), constant rate, no warm-up, no clipping.
        base.train.lr = 1e-3;
        base.train.beta2 = 0.999;
        base.train.weight_decay = 0.01;
        base.train.schedule = "constant";
        base.train.warmup_steps = 0;
        base.train.grad_clip = 0;
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
      throw std::runtime_error(key ? describe_key(key) + ": " + what : what);
    }
  }
  toml::table t = to_table(base);
  if (!config_path.empty()) merge_file(t, file, "config file '" + config_path + "'");
  for (const auto& [section, key, v, origin] : parsed) assign(t, section, key, *v.get("v"), origin);
  RunConfig c = from_table(t, "configuration");
  // data.dir empty means the lookup through SEQMIX_DATA_DIR; set but empty, it is a mistake
  // (an unexpanded shell variable), not "unset".
  if (const char* env = std::getenv("SEQMIX_DATA_DIR"); c.data.dir.empty() && env && !*env)
    throw std::runtime_error(
        "SEQMIX_DATA_DIR is set but empty (it names the folder scripts/setup.sh fills, used when "
        "data.dir / --data-dir is not given); set it to that folder, or unset it");
  // A pattern given here (not a preset's) repeats over the layers: entries past n_layers would
  // never be used, and a huge array would be stored in every config.toml and checkpoint.
  bool mixers_given = !!file["model"]["mixers"];
  for (const auto& [section, key, v, origin] : parsed)
    mixers_given = mixers_given || (section == "model" && key == "mixers");
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
