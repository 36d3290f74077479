// Softmax self-attention's registry row and its configuration section, [model.attention].
#include <memory>
#include <stdexcept>
#include <string>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/nn/self_attention.h"

namespace seqmix::mixers::attention {

namespace {

using models::ModelConfig;
using O = nn::SelfAttentionOptions;

const O& options(const ModelConfig& c) { return c.options<O>("attention"); }

}  // namespace

models::MixerSpec mixer() {
  models::MixerSpec s;
  s.name = "attention";
  s.summary = "softmax self-attention, model.n_heads heads (the Transformer baseline)";
  s.source = "GPT-2; the papers' baseline";
  s.section = "attention";
  // Its head count is the shared model.n_heads (the size presets set it, as GPT-2's
  // configurations do).
  s.defaults = models::MixerOptions(O(/*d_model=*/0, /*n_heads=*/0));
  s.fields = {
      models::backend_field<O>("kernel (fused, O(L) memory) | reference (ATen ops)"),
  };
  s.variants = {models::reference_variant()};
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    O o = options(c);
    o.d_model(c.d_model)
        .n_heads(c.n_heads)
        .causal(c.causal)
        .dropout(c.dropout)
        .bias(c.bias)
        .n_layers(c.n_layers);
    return std::make_shared<nn::SelfAttentionImpl>(o);
  };
  s.parameters = [](const ModelConfig& c) {
    using R = long double;
    const R D = static_cast<R>(c.d_model);
    return 4 * D * D + (c.bias ? 4 * D : 0);
  };
  // Q, K, V and the output; the reference path keeps its [L, L] probabilities per head.
  s.activations = [](const ModelConfig& c, double L) {
    return 4.0 * c.d_model + (options(c).backend() == ops::Backend::reference
                                  ? static_cast<double>(c.n_heads) * L
                                  : 0.0);
  };
  s.validate = [](const ModelConfig& c) {
    if (c.n_heads < 1 || c.d_model % c.n_heads != 0)
      throw std::invalid_argument("model.n_heads: must divide d_model (" +
                                  std::to_string(c.d_model) + "), got " +
                                  std::to_string(c.n_heads));
  };
  return s;
}

}  // namespace seqmix::mixers::attention
