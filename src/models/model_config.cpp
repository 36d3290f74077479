#include "seqmix/models/model_config.h"

#include <stdexcept>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/nn/feed_forward.h"

namespace seqmix::models {

using util::Field;

ModelConfig::ModelConfig() {
  for (const MixerSpec* spec : mixers_with_sections())
    sections.emplace(spec->section, spec->defaults);
}

std::vector<const MixerSpec*> ModelConfig::mixers_with_sections() {
  std::vector<const MixerSpec*> out;
  for (const auto& spec : mixer_registry())
    if (!spec.section.empty()) out.push_back(&spec);
  return out;
}

const std::string& ModelConfig::section_name(const MixerSpec& spec) { return spec.section; }

const std::vector<Field<MixerOptions>>& ModelConfig::section_fields(const MixerSpec& spec) {
  return spec.fields;
}

namespace {

const MixerSpec& section_owner(const std::string& section) {
  for (const auto& spec : mixer_registry())
    if (!spec.section.empty() && spec.section == section) return spec;
  throw std::invalid_argument("model: no registered mixer has a section [model." + section + "]");
}

}  // namespace

MixerOptions& ModelConfig::section_options(const std::string& section) {
  auto it = sections.find(section);
  if (it == sections.end()) it = sections.emplace(section, section_owner(section).defaults).first;
  return it->second;
}

const MixerOptions& ModelConfig::section_options(const std::string& section) const {
  const auto it = sections.find(section);
  return it != sections.end() ? it->second : section_owner(section).defaults;
}

const std::vector<Field<ModelConfig>>& ModelConfig::fields() {
  using M = ModelConfig;
  static const std::vector<Field<M>> f = {
      {"preset", &M::preset, "preset the configuration came from", {}, false, "--model"},
      {"size", &M::size, "size the configuration came from", {}, false, "--size"},
      {"vocab_size", &M::vocab_size, "tokens: 256 for bytes, else the tokenizer's pieces",
       util::at_least<M>(&M::vocab_size, 1)},
      {"d_model", &M::d_model, "model width D", util::at_least<M>(&M::d_model, 2)},
      {"n_layers", &M::n_layers, "blocks", util::at_least<M>(&M::n_layers, 1)},
      {"n_heads", &M::n_heads, "heads of every self-attention mixer"},
      {"d_ff", &M::d_ff, "FFN inner width (ESMLP: its hidden width)",
       util::at_least<M>(&M::d_ff, 1)},
      {"max_len", &M::max_len, "longest sequence, tokens", util::at_least<M>(&M::max_len, 1),
       false, "--max-len"},
      {"mixers", &M::mixers, "mixer of layer i is mixers[i % len] (seqmix info lists them)",
       [](const M& m) -> std::string {
         if (m.mixers.empty()) return "must name at least one mixer";
         for (const auto& name : m.mixers) try {
             find_mixer(name);
           } catch (const std::invalid_argument& e) {
             return e.what();
           }
         return "";
       }},
      {"causal", &M::causal, "causal (decoder) or bidirectional (encoder)"},
      {"activation", &M::activation, "FFN activation: gelu | leaky_relu | relu",
       util::parses<M>(&M::activation, nn::parse_activation)},
      {"pre_norm", &M::pre_norm, "pre-norm (GPT-2) or post-norm blocks"},
      {"dropout", &M::dropout, "residual, FFN and attention dropout",
       util::in_range<M>(&M::dropout, 0, 1, true)},
      {"tie_embeddings", &M::tie_embeddings, "LM head shares the token embedding"},
      {"norm", &M::norm, "norms in every block and before the head", {}, true},
      {"bias", &M::bias, "biases of the FFN and self-attention projections", {}, true},
      {"norm_type", &M::norm_type, "block norms: layer | batch",
       util::one_of<M>(&M::norm_type, {"layer", "batch"}), true},
      {"n_classes", &M::n_classes, "classes of the classification head (0: none)",
       util::at_least<M>(&M::n_classes, 0, " (0: no classification head)"), true},
      {"cls_pair", &M::cls_pair, "two-tower pair classifier (LRA Retrieval)",
       [](const M& m) -> std::string {
         return m.cls_pair && m.n_classes < 1 ? "needs a classification head (n_classes >= 1)"
                                              : "";
       },
       true},
  };
  return f;
}

namespace {

template <class S>
void check_fields(const S& s, const std::vector<Field<S>>& fields, const std::string& prefix) {
  for (const auto& f : fields)
    if (f.check) {
      const std::string what = f.check(s);
      if (!what.empty()) throw std::invalid_argument(prefix + f.name + ": " + what);
    }
}

}  // namespace

void ModelConfig::validate() const {
  visit_sections(*this, [](const std::string& path, const auto& section, const auto& fields) {
    check_fields(section, fields, "model." + (path.empty() ? "" : path + "."));
  });
  for (const auto& name : mixers) {
    const MixerSpec& spec = find_mixer(name);
    if (!causal && !spec.bidirectional)
      throw std::invalid_argument("model.causal: mixer '" + name +
                                  "' is causal only (it has no bidirectional form)");
    if (causal && !spec.causal)
      throw std::invalid_argument("model.causal: mixer '" + name +
                                  "' is bidirectional only (it has no causal form)");
    if (spec.validate) spec.validate(*this);
  }
}

int64_t ModelConfig::layers_of(size_t j) const {
  const auto M = static_cast<int64_t>(mixers.size());
  const auto jj = static_cast<int64_t>(j);
  return n_layers / M + (jj < n_layers % M ? 1 : 0);
}

namespace {

// The parameter count in long double: x86-64's 64-bit mantissa holds every integer below 2^64
// exactly, so no product or sum below that bound rounds, and none can overflow. Layers are
// counted per mixer kind (n_layers may be huge in an unchecked configuration).
long double count_parameters(const ModelConfig& c) {
  using R = long double;
  const R D = static_cast<R>(c.d_model), F = static_cast<R>(c.d_ff);
  const R V = static_cast<R>(c.vocab_size), L = static_cast<R>(c.max_len);
  R n = V * D + L * D;  // embeddings
  for (size_t j = 0; j < c.mixers.size(); ++j) {
    const int64_t layers = c.layers_of(j);
    if (layers <= 0) continue;
    const MixerSpec& spec = find_mixer(c.mixers[j]);
    R per = spec.parameters(c);
    if (spec.has_ffn) {
      per += 2 * D * F + (c.bias ? F + D : 0);  // FFN
      if (c.norm) per += 4 * D;                 // two norms (weight and bias)
    } else if (c.norm) {
      per += 2 * D;  // one norm
    }
    n += per * static_cast<R>(layers);
  }
  if (c.norm) n += 2 * D;             // final norm
  if (!c.tie_embeddings) n += D * V;  // head (no bias)
  if (c.n_classes > 0) n += D * static_cast<R>(c.n_classes) + static_cast<R>(c.n_classes);
  if (c.cls_pair) n += 4 * D * D + D;
  return n;
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  const long double n = count_parameters(*this);
  if (!(n < 9223372036854775807.0L))
    throw std::overflow_error("model: the parameter count (about " +
                              std::to_string(static_cast<double>(n)) +
                              ") does not fit in 64 bits; lower model.n_layers, model.d_model, "
                              "model.d_ff, model.vocab_size or model.max_len");
  return static_cast<int64_t>(n);
}

double ModelConfig::num_parameters_approx() const {
  return static_cast<double>(count_parameters(*this));
}

}  // namespace seqmix::models
