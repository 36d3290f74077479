// The causal mean's registry row and its configuration section, [model.mean].
#include <memory>
#include <string>

#include "causal_mean.h"
#include "seqmix/models/mixer_registry.h"

namespace seqmix::mixers::mean {

namespace {

using models::ModelConfig;
using O = CausalMeanOptions;

const O& options(const ModelConfig& c) { return c.options<O>("mean"); }

}  // namespace

models::MixerSpec mixer() {
  models::MixerSpec s;
  s.name = "causal-mean";
  s.summary =
      "the mean of the last model.mean.window positions: a baseline without learned mixing, "
      "and the template for a new mixer";
  s.source = "seqmix (docs/ARCHITECTURE.md, How to add a mixer)";
  s.section = "mean";
  s.bidirectional = false;
  s.defaults = models::MixerOptions(O(/*d_model=*/0, /*window=*/4));
  s.fields = {
      models::option_field<int64_t, O>(
          "window", "positions averaged: the current one and window - 1 before it",
          [](const O& o) { return o.window(); }, [](O& o, int64_t v) { o.window(v); },
          [](const O& o) -> std::string {
            return o.window() >= 1 ? "" : "must be >= 1, got " + std::to_string(o.window());
          }),
      models::backend_field<O>("kernel (CPU loops) | reference (ATen unfold and sum)"),
  };
  s.variants = {
      {"window_1", {{"window", util::FieldValue(int64_t{1})}}},
      models::reference_variant(),
  };
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    O o = options(c);
    o.d_model(c.d_model).n_layers(c.n_layers);
    return std::make_shared<CausalMeanImpl>(o);
  };
  s.parameters = [](const ModelConfig& c) {
    const long double D = static_cast<long double>(c.d_model);
    return 2 * D * D + D;  // W_v, W_o and its bias
  };
  return s;
}

}  // namespace seqmix::mixers::mean
