// The Extractor's registry row and its configuration section, [model.extractor].
#include <memory>
#include <string>

#include "seqmix/models/mixer_registry.h"
#include "seqmix/nn/extractor.h"

namespace seqmix::mixers::extractor {

namespace {

using models::ModelConfig;
using O = nn::ExtractorOptions;

const O& options(const ModelConfig& c) { return c.options<O>("extractor"); }

}  // namespace

models::MixerSpec mixer() {
  models::MixerSpec s;
  s.name = "extractor";
  s.summary = "the Extractor: one D x D matrix per lag (model.max_len lags), adjusted";
  s.source = "extractor eqs. 18-20";
  s.section = "extractor";
  s.bidirectional = false;  // the paper defines a causal convolution only
  // model.max_len is its number of lag matrices l.
  s.defaults = models::MixerOptions(O(/*d_model=*/0, /*max_len=*/0));
  s.fields = {
      models::option_field<bool, O>(
          "adjust", "the adjustment (X W_adj) * ext (eq. 19)",
          [](const O& o) { return o.adjust(); }, [](O& o, bool v) { o.adjust(v); }),
      models::option_field<bool, O>(
          "out_proj", "the optional W_opt (eq. 20)", [](const O& o) { return o.out_proj(); },
          [](O& o, bool v) { o.out_proj(v); }),
      models::backend_field<O>("kernel (FFT convolution) | reference (per-lag sum)"),
  };
  s.variants = {
      {"no_adjust_no_opt",
       {{"adjust", util::FieldValue(false)}, {"out_proj", util::FieldValue(false)}}},
      models::reference_variant(),
  };
  s.build = [](const ModelConfig& c, int64_t) -> std::shared_ptr<nn::MixerImpl> {
    O o = options(c);
    o.d_model(c.d_model).max_len(c.max_len).n_layers(c.n_layers);
    return std::make_shared<nn::ExtractorImpl>(o);
  };
  s.parameters = [](const ModelConfig& c) {
    using R = long double;
    const R D = static_cast<R>(c.d_model), L = static_cast<R>(c.max_len);
    const O& o = options(c);
    return L * D * D + (o.adjust() ? D * D : 0) + (o.out_proj() ? D * D : 0);
  };
  // X W_adj, ext, out.
  s.activations = [](const ModelConfig& c, double) { return 3.0 * c.d_model; };
  // The FFT form transforms its lag matrices: the spectrum of [L, D, D] at 2L points is
  // (L + 1) D^2 complex values, kept for backward, plus its gradient and the backward's
  // transform of it: about 6 L D^2 floats. Measured (seqmix bench models, extractor-transformer,
  // D = 256, 4 layers): a peak of 10 floats per lag-matrix entry at L = 512 and 1024, of which
  // weights, gradients and AdamW's moments are the other 4.
  s.workspace = [](const ModelConfig& c, double L) {
    const double D = static_cast<double>(c.d_model);
    return options(c).backend() == ops::Backend::kernel ? 6.0 * L * D * D : 0.0;
  };
  return s;
}

}  // namespace seqmix::mixers::extractor
