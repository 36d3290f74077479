#include "seqmix/nn/block.h"

namespace seqmix::nn {

BlockImpl::BlockImpl(std::shared_ptr<MixerImpl> mixer_, FeedForwardOptions ffn_opts, bool pre_norm_,
                     double dropout_)
    : torch::nn::Module("Block"), pre_norm(pre_norm_), dropout(dropout_) {
  const int64_t D = ffn_opts.d_model();
  mixer = register_module("mixer", std::move(mixer_));
  ffn = register_module("ffn", FeedForward(ffn_opts));
  norm_1 = register_module("norm_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  norm_2 = register_module("norm_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
}

at::Tensor BlockImpl::drop(const at::Tensor& x) {
  return dropout > 0 && is_training() ? at::dropout(x, dropout, true) : x;
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  if (pre_norm) {
    at::Tensor h = x + drop(mixer->forward(norm_1(x), mask));
    return h + drop(ffn(norm_2(h)));
  }
  at::Tensor h = norm_1(x + drop(mixer->forward(x, mask)));
  return norm_2(h + drop(ffn(h)));
}

at::Tensor BlockImpl::step(const at::Tensor& x_t, MixerState& state) {
  if (pre_norm) {
    at::Tensor h = x_t + mixer->step(norm_1(x_t), state);
    return h + ffn(norm_2(h));
  }
  at::Tensor h = norm_1(x_t + mixer->step(x_t, state));
  return norm_2(h + ffn(h));
}

}  // namespace seqmix::nn
