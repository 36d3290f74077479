#include "seqmix/models/presets.h"

#include <stdexcept>

namespace seqmix::models {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

using V = util::FieldValue;
using Names = std::vector<std::string>;

// The Extractor paper's stack (Sec. 4, 6): no LayerNorm, no biases, no dropout, learned
// positions, ReLU FFN, separate output matrix.
std::vector<FieldAssignment> extractor_stack(const char* mixer) {
  return {{"mixers", V(Names{mixer})}, {"norm", V(false)}, {"bias", V(false)},
          {"activation", V(std::string("relu"))}, {"tie_embeddings", V(false)}};
}

// The Extractor paper's training (Table 1) names only AdamW with lr 1e-3 and betas (0.9,
// 0.999). The rest is seqmix's choice where the paper is silent: PyTorch's AdamW default
// weight decay (0.01), and, as nothing else is named, a constant rate with no warm-up and
// no clipping.
std::vector<FieldAssignment> extractor_training() {
  return {{"train.lr", V(1e-3)},
          {"train.beta2", V(0.999)},
          {"train.weight_decay", V(0.01)},
          {"train.schedule", V(std::string("constant"))},
          {"train.warmup_steps", V(int64_t{0})},
          {"train.grad_clip", V(0.0)}};
}

// ETSMLP (etsmlp Sec. 3.2, appendix B): ESMLP blocks (d_ff = Table 5's H), ReLU, the
// LRU-style normalisation, |mu| <= 0.9999. The paper's models are bidirectional encoders
// (classification, mean pooling); the -lm presets are the causal variant for language
// modelling, which also decodes step by step.
std::vector<FieldAssignment> etsmlp_stack(bool gate, bool causal) {
  return {{"mixers", V(Names{"etsmlp"})}, {"activation", V(std::string("relu"))},
          {"ces.normalize", V(true)},     {"ces.gate", V(gate)},
          {"causal", V(causal)}};
}

ModelPreset row(std::string name, std::string summary, std::string source,
                std::vector<FieldAssignment> model) {
  ModelPreset p;
  p.name = std::move(name);
  p.summary = std::move(summary);
  p.source = std::move(source);
  p.model = std::move(model);
  return p;
}

std::vector<ModelPreset> make_presets() {
  const auto structure_b = V(Names{"aib", "attention"});
  std::vector<ModelPreset> rows;
  rows.push_back(row("weird-net", "Structure B: AIB attention and self-attention alternating",
                     "weird-net Sec. III.E", {{"mixers", structure_b}}));
  ModelPreset alias = rows.back();
  alias.name = "aib-net";
  alias.alias_of = "weird-net";
  alias.summary = "alias of weird-net";
  alias.source = "aib-net";
  rows.push_back(alias);
  rows.push_back(row("weird-net-a", "Structure A: AIB attention in every layer",
                     "weird-net Sec. III.E", {{"mixers", V(Names{"aib"})}}));
  rows.back().task_role = TaskRole::encoder;
  rows.push_back(row("moss", "Structure B, Leaky-ReLU FFN, biases on A and V", "moss Sec. III",
                     {{"mixers", structure_b},
                      {"activation", V(std::string("leaky_relu"))},
                      {"aib.bias", V(true)}}));
  rows.push_back(row("transformer", "softmax self-attention in every layer (GPT-2 style)",
                     "GPT-2", {{"mixers", V(Names{"attention"})}}));
  rows.back().task_role = TaskRole::encoder;
  rows.push_back(row("extractor-transformer",
                     "the Extractor in place of self-attention (its paper's plain stack)",
                     "extractor Sec. 4, 6", extractor_stack("extractor")));
  rows.back().lm_train = extractor_training();
  rows.push_back(row("transformer-plain",
                     "the same stack with self-attention (the Extractor paper's baseline)",
                     "extractor Sec. 6", extractor_stack("attention")));
  rows.back().lm_train = extractor_training();
  for (const bool gate : {false, true}) {
    const std::string base = gate ? "etsmlp-gate" : "etsmlp";
    const std::string what = gate ? "ESMLP-Gate" : "ESMLP";
    rows.push_back(row(base, what + " encoder (bidirectional CES MLP) for classification",
                       "etsmlp Sec. 3.2, appendix B", etsmlp_stack(gate, false)));
    rows.back().task_role = TaskRole::encoder;
    rows.back().task_recipe = TaskRecipe::etsmlp;
    rows.back().language_model = false;
    rows.back().lm_variant = base + "-lm";
  }
  for (const bool gate : {false, true}) {
    const std::string what = gate ? "ESMLP-Gate" : "ESMLP";
    rows.push_back(row(gate ? "etsmlp-gate-lm" : "etsmlp-lm",
                       "causal " + what + " language model (decodes step by step)",
                       "etsmlp Sec. 3.2", etsmlp_stack(gate, true)));
    rows.back().task_recipe = TaskRecipe::etsmlp;
  }
  return rows;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> rows = make_presets();
  return rows;
}

const ModelPreset& find_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return p;
  throw std::invalid_argument("unknown model preset '" + name +
                              "' (expected one of: " + join(family_names()) + ")");
}

std::vector<std::string> family_names() {
  std::vector<std::string> names;
  for (const auto& p : model_presets()) names.push_back(p.name);
  return names;
}

const std::vector<SizePreset>& size_presets() {
  static const std::vector<SizePreset> sizes = {
      {"tiny", 2, 64, 256, 2, 128, "seqmix (tests, smoke runs)"},
      {"mini", 4, 128, 512, 4, 256, "seqmix (CPU demo)"},
      {"base", 6, 256, 1024, 8, 512, "seqmix (CPU, hours)"},
      {"small", 12, 768, 3072, 12, 1024, "weird-net Table VII (GPT-2 small)"},
      {"medium", 24, 1024, 4096, 16, 1024, "weird-net Table VII (GPT-2 medium)"},
      {"large", 36, 1280, 5120, 20, 1024, "weird-net Table VII (GPT-2 large)"},
      {"table1", 6, 128, 512, 8, 128, "extractor Table 1 (m = 6, d = 128, c = 512, l = 128)"},
  };
  return sizes;
}

namespace {

template <class S>
bool assign(S& s, const std::vector<util::Field<S>>& fields, const std::string& path,
            const std::string& key, const util::FieldValue& value) {
  for (const auto& f : fields) {
    if (key != f.name) continue;
    bool stored = false;
    try {
      stored = f.set(s, value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + key + ": " + e.what());
    }
    if (!stored)
      throw std::invalid_argument("model field " + key + ": must be " +
                                  util::field_type_name(f.type()) + ", got " +
                                  util::field_type_name(value));
    return true;
  }
  return false;
}

}  // namespace

void apply_model_fields(ModelConfig& c, const std::vector<FieldAssignment>& assignments) {
  for (const auto& assignment : assignments) {
    // Not a structured binding: the lambda below captures the value, which C++17 (and
    // clang, which scripts/fuzz.sh builds with) allows only for variables.
    const std::string& key = assignment.first;
    const auto& value = assignment.second;
    const auto dot = key.find('.');
    const std::string section = dot == std::string::npos ? "" : key.substr(0, dot);
    const std::string name = dot == std::string::npos ? key : key.substr(dot + 1);
    bool done = false;
    ModelConfig::visit_sections(c, [&](const std::string& path, auto& s, const auto& fields) {
      if (!done && path == section)
        done = assign(s, fields, "model." + (path.empty() ? "" : path + "."), name, value);
    });
    if (!done) throw std::invalid_argument("unknown model key 'model." + key + "'");
  }
}

ModelConfig make_model_config(const std::string& family, const std::string& size) {
  const ModelPreset& preset = find_preset(family);
  ModelConfig c;
  c.preset = family;
  c.size = size;
  apply_model_fields(c, preset.model);
  for (const auto& s : size_presets()) {
    if (s.name != size) continue;
    c.n_layers = s.n_layers;
    c.d_model = s.d_model;
    c.d_ff = s.d_ff;
    c.n_heads = s.n_heads;
    c.max_len = s.max_len;
    return c;
  }
  std::vector<std::string> names;
  for (const auto& s : size_presets()) names.push_back(s.name);
  throw std::invalid_argument("unknown model size '" + size + "' (expected one of: " + join(names) +
                              ")");
}

}  // namespace seqmix::models
