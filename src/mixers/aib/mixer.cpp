// AIB attention's registry row and its configuration section, [model.aib].
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/nn/aib_attention.h"
#include "seqmix/ops/aib_scan.h"

namespace seqmix::mixers::aib {

namespace {

using models::ModelConfig;
using nn::AIBAttentionOptions;
using O = AIBAttentionOptions;

const O& options(const ModelConfig& c) { return c.options<O>("aib"); }

// ops::aib_num_levels(max_len), bounded so that any max_len (up to 2^63 - 1) terminates.
int64_t levels(int64_t max_len) {
  int64_t k = 0;
  while (k < 63 && (int64_t{1} << k) < max_len) ++k;
  return std::max<int64_t>(k, 1);
}

}  // namespace

models::MixerSpec mixer() {
  models::MixerSpec s;
  s.name = "aib";
  s.summary = "AIB (Weird) attention: log-depth weighted prefix sum O = H / U";
  s.source = "weird-net Sec. III, aib-net, moss";
  s.section = "aib";
  s.defaults = models::MixerOptions(O(/*d_model=*/0, /*max_len=*/0));
  s.fields = {
      models::option_field<std::string, O>(
          "weights", "per-distance weights: prefix_exp | exp | ones",
          [](const O& o) { return ops::to_string(o.weights()); },
          [](O& o, const std::string& v) { o.weights(ops::parse_aib_weights(v)); }),
      models::option_field<bool, O>(
          "bias", "biases on A and V (moss)", [](const O& o) { return o.bias_av(); },
          [](O& o, bool v) { o.bias_av(v); }),
      models::backend_field<O>("kernel (fused CPU scan) | reference (literal ATen ops)",
                               "--aib-impl"),
  };
  s.variants = {
      {"exp_bias",
       {{"weights", util::FieldValue(std::string("exp"))}, {"bias", util::FieldValue(true)}}},
      {"ps_attention", {{"weights", util::FieldValue(std::string("ones"))}}},
      models::reference_variant(),
  };
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    O o = options(c);
    o.d_model(c.d_model).max_len(c.max_len).causal(c.causal).n_layers(c.n_layers);
    return std::make_shared<nn::AIBAttentionImpl>(o);
  };
  s.parameters = [](const ModelConfig& c) {
    using R = long double;
    const R D = static_cast<R>(c.d_model);
    const O& o = options(c);
    return 3 * D * D + D + (o.bias_av() ? 2 * D : 0) +
           (o.weights() == ops::AIBWeights::ones ? 0 : static_cast<R>(levels(c.max_len)) * D);
  };
  s.activations = [](const ModelConfig& c, double) { return 3.0 * c.d_model; };  // A, V, O
  s.validate = [](const ModelConfig& c) {
    if (!c.causal && c.d_model % 2 != 0)
      throw std::invalid_argument("model.d_model: must be even for the AIB encoder");
  };
  return s;
}

}  // namespace seqmix::mixers::aib
