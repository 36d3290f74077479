#pragma once
// The causal mean mixer (internal to libseqmix; it is reached through the mixer registry
// as "causal-mean" and from Python as torch.ops.seqmix.causal_mean).
//
// Op seqmix::causal_mean(Tensor x, int window, Tensor? mask=None) -> Tensor:
//   y[b, t] = sum_{s in S(b, t)} x[b, s] / |S(b, t)|,
//   S(b, t) = {s : t - window < s <= t, mask[b, s]}; y[b, t] = 0 where mask[b, t] is false
//   (or S is empty). x [B, L, D] float32 | float64, mask [B, L] bool (true = valid), window
//   >= 1. Registered for CPU (cpu/causal_mean_kernel.h), Meta and Autograd;
//   seqmix::causal_mean_reference is the same function from ATen ops (unfold and sum).
// Layer CausalMean: Y = W_o causal_mean(W_v X) (W_v without bias, W_o with), W_v ~ N(0, 1/D),
// W_o ~ N(0, 1/(2 N D)), biases 0; decoding keeps the last `window` rows of W_v X.
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "seqmix/nn/mixer.h"
#include "seqmix/ops/common.h"

namespace seqmix::mixers::mean {

// The op through the dispatcher: backend kernel calls seqmix::causal_mean, reference
// seqmix::causal_mean_reference. @throws c10::Error for a shape, dtype or window it rejects.
at::Tensor causal_mean(const at::Tensor& x, int64_t window, const at::Tensor& mask,
                       ops::Backend backend = ops::Backend::kernel);

struct CausalMeanOptions {
  CausalMeanOptions(int64_t d_model, int64_t window) : d_model_(d_model), window_(window) {}
  TORCH_ARG(int64_t, d_model);
  /// Positions averaged: the current one and the window - 1 before it.
  TORCH_ARG(int64_t, window);
  TORCH_ARG(ops::Backend, backend) = ops::Backend::kernel;
  /// Stacked layers N, for W_o's initialisation.
  TORCH_ARG(int64_t, n_layers) = 1;
};

class CausalMeanImpl : public nn::Mixer<CausalMeanImpl> {
 public:
  explicit CausalMeanImpl(CausalMeanOptions options);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;
  /// x [B, L, D], mask [B, L] bool or undefined -> [B, L, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) override;
  /// State: {the last min(t, window) rows of W_v X, [B, <= window, D]}.
  nn::MixerState init_state(int64_t batch) const override;
  at::Tensor step(const at::Tensor& x_t, nn::MixerState& state) override;
  bool causal() const override { return true; }

  CausalMeanOptions options;
  torch::nn::Linear w_v{nullptr}, w_o{nullptr};
};
TORCH_MODULE(CausalMean);

}  // namespace seqmix::mixers::mean
