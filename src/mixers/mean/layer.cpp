// The CausalMean layer (causal_mean.h).
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "causal_mean.h"

namespace seqmix::mixers::mean {

CausalMeanImpl::CausalMeanImpl(CausalMeanOptions options_)
    : nn::Mixer<CausalMeanImpl>("CausalMean"), options(std::move(options_)) {
  reset();
}

void CausalMeanImpl::reset() {
  const int64_t D = options.d_model();
  if (D < 1 || options.window() < 1)
    throw std::invalid_argument("CausalMean: d_model and window must be >= 1, got " +
                                std::to_string(D) + " and " + std::to_string(options.window()));
  w_v = register_module("w_v", torch::nn::Linear(torch::nn::LinearOptions(D, D).bias(false)));
  w_o = register_module("w_o", torch::nn::Linear(torch::nn::LinearOptions(D, D)));
  torch::NoGradGuard no_grad;
  const double d = static_cast<double>(D), n = static_cast<double>(options.n_layers());
  w_v->weight.normal_(0.0, 1.0 / std::sqrt(d));
  w_o->weight.normal_(0.0, 1.0 / std::sqrt(2.0 * n * d));
  w_o->bias.zero_();
}

void CausalMeanImpl::pretty_print(std::ostream& stream) const {
  stream << "seqmix::CausalMean(d_model=" << options.d_model() << ", window=" << options.window()
         << ", backend=" << ops::to_string(options.backend()) << ")";
}

at::Tensor CausalMeanImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options.d_model(), "CausalMean: x must be [B, L, ",
              options.d_model(), "], got ", x.sizes());
  const at::Tensor y = w_o(causal_mean(w_v(x), options.window(), mask, options.backend()));
  // Padded positions output 0 (W_o's bias would reach them otherwise).
  return mask.defined() ? y * mask.unsqueeze(-1).to(y.scalar_type()) : y;
}

nn::MixerState CausalMeanImpl::init_state(int64_t batch) const {
  nn::MixerState s;
  s.tensors = {torch::empty({batch, 0, options.d_model()},
                            w_v->weight.options().requires_grad(false))};
  return s;
}

at::Tensor CausalMeanImpl::step(const at::Tensor& x_t, nn::MixerState& state) {
  TORCH_CHECK(x_t.dim() == 2 && x_t.size(1) == options.d_model(),
              "CausalMean::step: x_t must be [B, ", options.d_model(), "], got ", x_t.sizes());
  TORCH_CHECK(state.tensors.size() == 1, "CausalMean::step: state was not made by init_state");
  at::Tensor& last = state.tensors[0];
  last = at::cat({last, w_v(x_t).unsqueeze(1).to(last.scalar_type())}, 1);
  if (last.size(1) > options.window()) last = last.narrow(1, 1, options.window()).contiguous();
  ++state.pos;
  return w_o(last.mean(1));
}

}  // namespace seqmix::mixers::mean
