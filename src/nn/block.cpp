#include "seqmix/nn/block.h"

namespace seqmix::nn {

BlockImpl::BlockImpl(std::shared_ptr<MixerImpl> mixer_, FeedForwardOptions ffn_opts, bool pre_norm_,
                     double dropout_, bool norm)
    : torch::nn::Module("Block"), pre_norm(pre_norm_), dropout(dropout_) {
  const int64_t D = ffn_opts.d_model();
  mixer = register_module("mixer", std::move(mixer_));
  ffn = register_module("ffn", FeedForward(ffn_opts));
  if (!norm) return;
  norm_1 = register_module("norm_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  norm_2 = register_module("norm_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
}

at::Tensor BlockImpl::drop(const at::Tensor& x) {
  return dropout > 0 && is_training() ? at::dropout(x, dropout, true) : x;
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  if (pre_norm) {
    at::Tensor h = x + drop(mixer->forward(n1(x), mask));
    return h + drop(ffn(n2(h)));
  }
  at::Tensor h = n1(x + drop(mixer->forward(x, mask)));
  return n2(h + drop(ffn(h)));
}

at::Tensor BlockImpl::step(const at::Tensor& x_t, MixerState& state) {
  if (pre_norm) {
    at::Tensor h = x_t + mixer->step(n1(x_t), state);
    return h + ffn(n2(h));
  }
  at::Tensor h = n1(x_t + mixer->step(x_t, state));
  return n2(h + ffn(h));
}

}  // namespace seqmix::nn
