#include "seqmix/models/model_config.h"

#include <stdexcept>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/nn/ces.h"
#include "seqmix/nn/feed_forward.h"
#include "seqmix/ops/aib_scan.h"

namespace seqmix::models {

namespace {

using util::Field;

// Every op's implementations are spelled alike (ops/common.h).
template <class S>
typename Field<S>::Check backend(std::string S::*m) {
  return util::one_of<S>(m, {"kernel", "reference"});
}

}  // namespace

const std::vector<Field<AIBConfig>>& AIBConfig::fields() {
  static const std::vector<Field<AIBConfig>> f = {
      {"weights", &AIBConfig::weights, "per-distance weights: prefix_exp | exp | ones",
       util::parses<AIBConfig>(&AIBConfig::weights, ops::parse_aib_weights)},
      {"bias", &AIBConfig::bias, "biases on A and V (moss)"},
      {"impl", &AIBConfig::impl, "kernel (fused CPU scan) | reference (literal ATen ops)",
       backend<AIBConfig>(&AIBConfig::impl), false, "--aib-impl"},
  };
  return f;
}

const std::vector<Field<AttentionConfig>>& AttentionConfig::fields() {
  static const std::vector<Field<AttentionConfig>> f = {
      {"impl", &AttentionConfig::impl, "kernel (fused, O(L) memory) | reference (ATen ops)",
       backend<AttentionConfig>(&AttentionConfig::impl)},
  };
  return f;
}

const std::vector<Field<CESConfig>>& CESConfig::fields() {
  using C = CESConfig;
  // The ring and bounds are checked together: each check sees the whole section.
  auto ring = [](const C& c) -> std::string {
    if (c.r_min > 0 && c.r_min <= c.r_max && c.r_max < 1) return "";
    return "need 0 < r_min <= r_max < 1, got r_min " + util::format_number(c.r_min) +
           ", r_max " + util::format_number(c.r_max);
  };
  static const std::vector<Field<C>> f = {
      {"gate", &C::gate, "ESMLP-Gate: output times sigmoid(W_g X)"},
      {"shortcut", &C::shortcut, "omega (the authors' code) | sigmoid (eq. 13) | none",
       util::parses<C>(&C::shortcut, nn::parse_ces_shortcut)},
      {"normalize", &C::normalize, "kernel times sqrt(1 - |mu|^2) (appendix B, LRU)"},
      {"r_min", &C::r_min, "inner radius of lambda's init ring", ring},
      {"r_max", &C::r_max, "outer radius of lambda's init ring", ring},
      {"max_phase", &C::max_phase,
       "largest initial phase of lambda, radians (0 with r_min = r_max: one fixed point, "
       "etsmlp Table 4's Stable)",
       util::finite_above<C>(&C::max_phase, 0, false, " (radians)")},
      {"max_lambda", &C::max_lambda, "bound on |mu| (eq. 12)",
       [](const C& c) -> std::string {
         if (c.max_lambda > 0 && c.max_lambda <= 1 && !(c.normalize && c.max_lambda >= 1))
           return "";
         return "must be in (0, 1] (below 1 with normalize), got " +
                util::format_number(c.max_lambda);
       }},
      {"impl", &C::impl, "kernel (recurrence) | reference (FFT)", backend<C>(&C::impl)},
      {"alpha", &C::alpha, "learned damping exponent alpha (false: etsmlp Table 3 No alpha)"},
      {"beta", &C::beta, "learned input factor beta (false: etsmlp Table 3 No beta)"},
      {"real", &C::real, "real instead of complex lambda, alpha, beta (etsmlp Table 3 Real)"},
  };
  return f;
}

const std::vector<Field<ExtractorConfig>>& ExtractorConfig::fields() {
  using E = ExtractorConfig;
  static const std::vector<Field<E>> f = {
      {"adjust", &E::adjust, "the adjustment (X W_adj) * ext (eq. 19)"},
      {"out_proj", &E::out_proj, "the optional W_opt (eq. 20)"},
      {"impl", &E::impl, "kernel (FFT convolution) | reference (per-lag sum)",
       backend<E>(&E::impl)},
  };
  return f;
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
