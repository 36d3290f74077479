#include "seqmix/nn/extractor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>

namespace seqmix::nn {

ExtractorImpl::ExtractorImpl(ExtractorOptions options_)
    : Mixer<ExtractorImpl>("Extractor"), options(std::move(options_)) {
  reset();
}

void ExtractorImpl::reset() {
  const int64_t D = options.d_model(), l = options.max_len();
  if (D <= 0 || l <= 0)
    throw std::invalid_argument(
        fmt::format("Extractor: d_model and max_len must be positive, got {} and {}", D, l));
  w_ext = register_parameter("w_ext", torch::empty({l, D, D}));
  if (options.adjust())
    w_adj = register_module("w_adj", torch::nn::Linear(torch::nn::LinearOptions(D, D).bias(false)));
  if (options.out_proj())
    w_opt = register_module("w_opt", torch::nn::Linear(torch::nn::LinearOptions(D, D).bias(false)));
  reset_parameters();
}

void ExtractorImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const double D = static_cast<double>(options.d_model());
  const double l = static_cast<double>(options.max_len());
  const double m = static_cast<double>(options.n_layers());
  w_ext.normal_(0.0, 1.0 / std::sqrt(l * D));
  if (w_adj) w_adj->weight.normal_(0.0, 1.0 / std::sqrt(D));
  if (w_opt) w_opt->weight.normal_(0.0, 1.0 / std::sqrt(2.0 * m * D));
}

void ExtractorImpl::pretty_print(std::ostream& stream) const {
  stream << "seqmix::nn::Extractor(d_model=" << options.d_model()
         << ", max_len=" << options.max_len() << ", adjust=" << options.adjust()
         << ", out_proj=" << options.out_proj() << ", backend=" << ops::to_string(options.backend())
         << ")";
}

at::Tensor ExtractorImpl::finish(const at::Tensor& x, const at::Tensor& ext) {
  at::Tensor y = w_adj ? w_adj(x) * ext : ext;
  return w_opt ? w_opt(y) : y;
}

at::Tensor ExtractorImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  if (x.dim() != 3 || x.size(2) != options.d_model())
    throw std::invalid_argument(fmt::format("Extractor: x must be [B, t, {}], got {}",
                                            options.d_model(), fmt::join(x.sizes(), ", ")));
  if (!mask.defined()) return finish(x, ops::extractor_conv(x, w_ext, options.backend()));
  // Zero padded inputs (they then feed nothing forward) and padded outputs (without the
  // adjustment they would carry the sum over earlier positions).
  const at::Tensor keep = mask.unsqueeze(-1).to(x.dtype());
  const at::Tensor xin = x * keep;
  return finish(xin, ops::extractor_conv(xin, w_ext, options.backend())) * keep;
}

MixerState ExtractorImpl::init_state(int64_t batch) const {
  MixerState s;
  s.tensors = {torch::empty({batch, 0, options.d_model()}, w_ext.options().requires_grad(false))};
  return s;
}

at::Tensor ExtractorImpl::step(const at::Tensor& x_t, MixerState& state) {
  if (x_t.dim() != 2 || x_t.size(1) != options.d_model())
    throw std::invalid_argument(fmt::format("Extractor::step: x_t must be [B, {}], got {}",
                                            options.d_model(), fmt::join(x_t.sizes(), ", ")));
  if (state.tensors.size() != 1)
    throw std::invalid_argument("Extractor::step: state was not made by init_state");
  if (state.pos >= options.max_len())
    throw std::invalid_argument(fmt::format(
        "Extractor::step: position {} reaches max_len {} (the number of lag matrices)", state.pos,
        options.max_len()));
  at::Tensor& history = state.tensors[0];
  history = at::cat({history, x_t.unsqueeze(1).to(history.scalar_type())}, 1);
  ++state.pos;
  return finish(x_t, ops::extractor_conv_last(history, w_ext));
}

}  // namespace seqmix::nn
