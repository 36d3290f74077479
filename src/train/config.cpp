#include "seqmix/train/config.h"

#include <toml++/toml.h>

#include <fstream>
#include <sstream>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <tuple>

#include "seqmix/data/tasks.h"
#include "seqmix/models/presets.h"
#include "seqmix/train/task_presets.h"

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

void RunConfig::validate() const {
  model.validate();
  auto fail = [](const std::string& key, const std::string& what) {
    throw std::invalid_argument("train." + key + ": " + what);
  };
  const auto& t = train;
  if (t.batch_size < 1) fail("batch_size", "must be >= 1");
  if (t.max_steps < 0) fail("max_steps", "must be >= 0");
  if (!(t.lr > 0)) fail("lr", "must be > 0");
  if (t.min_lr_ratio < 0 || t.min_lr_ratio > 1) fail("min_lr_ratio", "must be in [0, 1]");
  if (t.warmup_steps < 0) fail("warmup_steps", "must be >= 0");
  if (t.decay_steps < 0) fail("decay_steps", "must be >= 0 (0: train.max_steps)");
  if (t.schedule != "cosine" && t.schedule != "linear" && t.schedule != "constant")
    fail("schedule", "must be cosine, linear or constant, got '" + t.schedule + "'");
  if (t.weight_decay < 0) fail("weight_decay", "must be >= 0");
  if (t.beta1 < 0 || t.beta1 >= 1) fail("beta1", "must be in [0, 1)");
  if (t.beta2 < 0 || t.beta2 >= 1) fail("beta2", "must be in [0, 1)");
  if (!(t.eps > 0)) fail("eps", "must be > 0");
  if (t.grad_clip < 0) fail("grad_clip", "must be >= 0");
  if (t.eval_interval < 0) fail("eval_interval", "must be >= 0");
  if (t.eval_max_bytes < 0) fail("eval_max_bytes", "must be >= 0");
  if (t.checkpoint_interval < 0) fail("checkpoint_interval", "must be >= 0");
  if (t.log_interval < 1) fail("log_interval", "must be >= 1");
  if (t.seed < 0) fail("seed", "must be >= 0");
  if (t.threads < 0) fail("threads", "must be >= 0");
  if (t.nonfinite != "stop" && t.nonfinite != "skip")
    fail("nonfinite", "must be stop or skip, got '" + t.nonfinite + "'");
  if (data.eval_split != "valid" && data.eval_split != "test")
    throw std::invalid_argument("data.eval_split: must be valid or test, got '" + data.eval_split +
                                "'");
  if (data.tokenizer.empty())
    throw std::invalid_argument("data.tokenizer: must be 'bytes' or a SentencePiece model path");
  if (data.pad_to_multiple < 1)
    throw std::invalid_argument("data.pad_to_multiple: must be >= 1, got " +
                                std::to_string(data.pad_to_multiple));
  if (!data.task.empty()) {
    const data::TaskInfo* info = nullptr;
    try {
      info = &data::task_info(data.task);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("data.task: ") + e.what());
    }
    auto need = [&](const char* key, int64_t have, int64_t want, const char* why) {
      if (have != want)
        throw std::invalid_argument(std::string("model.") + key + ": task '" + data.task +
                                    "' needs " + std::to_string(want) + " (" + why + "), got " +
                                    std::to_string(have));
    };
    need("vocab_size", model.vocab_size, info->vocab_size, "its token ids");
    need("n_classes", model.n_classes, info->n_classes, "its classes");
    need("cls_pair", model.cls_pair, info->pair, "1: pairs of sequences, 0: single sequences");
    if (data.tokenizer != "bytes")
      throw std::invalid_argument("data.tokenizer: task '" + data.task +
                                  "' brings its own tokens; set 'bytes', got '" + data.tokenizer +
                                  "'");
    if (data.train_examples < 0 || data.valid_examples < 0 || data.test_examples < 0)
      throw std::invalid_argument("data.train_examples / valid_examples / test_examples: must be "
                                  ">= 0 (0: the task's default)");
    if (data.task_seed < 0) throw std::invalid_argument("data.task_seed: must be >= 0");
    // BatchNorm's batch statistics would count the padding of variable-length examples.
    if (model.norm_type == "batch" &&
        (data.task == "listops" || data.task == "text" || data.task == "retrieval"))
      throw std::invalid_argument("model.norm_type: 'batch' would fold padding into the batch "
                                  "statistics of task '" + data.task +
                                  "' (examples of different lengths); use 'layer'");
    return;
  }
  if (model.n_classes > 0)
    throw std::invalid_argument("model.n_classes: a classification head needs a task "
                                "(data.task, --task); language modelling uses the LM head");
  if (data.tokenizer == "bytes" && model.vocab_size != 256)
    throw std::invalid_argument("model.vocab_size: byte-level models (data.tokenizer = 'bytes') "
                                "need 256, got " + std::to_string(model.vocab_size) +
                                "; give a SentencePiece model as data.tokenizer (--tokenizer)");
}

RunConfig resolve_config(const std::string& config_path, const std::vector<std::string>& overrides,
                         const RunConfig* base_in) {
  toml::table file;
  if (!config_path.empty()) {
    std::ifstream in(config_path);
    if (!in) throw std::runtime_error("config file '" + config_path + "' cannot be opened");
    std::ostringstream ss;
    ss << in.rdbuf();
    file = parse_toml(ss.str(), "config file '" + config_path + "'");
  }
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
      v = toml::table{{"v", value}};  // a bare word is a string
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
      throw std::runtime_error(e.what());
    }
  }
  toml::table t = to_table(base);
  if (!config_path.empty()) merge_file(t, file, "config file '" + config_path + "'");
  for (const auto& [section, key, v, origin] : parsed) assign(t, section, key, *v.get("v"), origin);
  RunConfig c = from_table(t, "configuration");
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("invalid configuration: ") + e.what());
  }
  return c;
}

}  // namespace seqmix::train
