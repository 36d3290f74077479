#include "seqmix/nn/block.h"

#include <stdexcept>

namespace seqmix::nn {

BlockImpl::BlockImpl(std::shared_ptr<MixerImpl> mixer_, FeedForwardOptions ffn_opts, bool pre_norm_,
                     double dropout_, bool norm, bool with_ffn, const std::string& norm_type)
    : torch::nn::Cloneable<BlockImpl>("Block"),
      pre_norm(pre_norm_),
      dropout(dropout_),
      given_mixer_(std::move(mixer_)),
      ffn_options_(std::move(ffn_opts)),
      norm_(norm),
      with_ffn_(with_ffn),
      norm_type_(norm_type) {
  if (norm_type != "layer" && norm_type != "batch")
    throw std::invalid_argument("Block: unknown norm type '" + norm_type +
                                "' (expected layer or batch)");
  reset();
}

void BlockImpl::reset() {
  const int64_t D = ffn_options_.d_model();
  std::shared_ptr<MixerImpl> m = std::move(given_mixer_);
  if (!m) {
    m = std::dynamic_pointer_cast<MixerImpl>(mixer->clone());
    TORCH_CHECK(m, "Block: the mixer's clone() did not return a mixer");
  }
  mixer = register_module("mixer", std::move(m));
  ffn = nullptr;
  norm_1 = norm_2 = nullptr;
  bn_1 = bn_2 = nullptr;
  if (with_ffn_) ffn = register_module("ffn", FeedForward(ffn_options_));
  if (!norm_) return;
  if (norm_type_ == "layer") {
    norm_1 = register_module("norm_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
    if (with_ffn_)
      norm_2 = register_module("norm_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D})));
  } else {
    bn_1 = register_module("bn_1", torch::nn::BatchNorm1d(D));
    if (with_ffn_) bn_2 = register_module("bn_2", torch::nn::BatchNorm1d(D));
  }
}

// BatchNorm1d normalises channels over [N, C] or [N, C, L]: positions join the batch.
at::Tensor BlockImpl::apply_norm(torch::nn::LayerNorm& ln, torch::nn::BatchNorm1d& bn,
                                 const at::Tensor& x) {
  if (ln) return ln(x);
  if (!bn) return x;
  return x.dim() == 3 ? bn(x.transpose(1, 2)).transpose(1, 2) : bn(x);
}

at::Tensor BlockImpl::drop(const at::Tensor& x) {
  return dropout > 0 && is_training() ? at::dropout(x, dropout, true) : x;
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  if (pre_norm) {
    at::Tensor h = x + drop(mixer->forward(n1(x), mask));
    return ffn ? h + drop(ffn(n2(h))) : h;
  }
  at::Tensor h = n1(x + drop(mixer->forward(x, mask)));
  return ffn ? n2(h + drop(ffn(h))) : h;
}

at::Tensor BlockImpl::step(const at::Tensor& x_t, MixerState& state) {
  if (pre_norm) {
    at::Tensor h = x_t + mixer->step(n1(x_t), state);
    return ffn ? h + ffn(n2(h)) : h;
  }
  at::Tensor h = n1(x_t + mixer->step(x_t, state));
  return ffn ? n2(h + ffn(h)) : h;
}

}  // namespace seqmix::nn
