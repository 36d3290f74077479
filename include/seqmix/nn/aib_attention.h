#pragma once
/// @file aib_attention.h
/// AIB attention (alias Weird attention) layer: moss-aib-attention Sec. III, weird-net
/// Sec. III.B, Algorithms 1 (decoder) and 2 (encoder).
///   A = X W_A (+ b_A),  V = X W_V (+ b_V),  O = aib_scan(A, V, w),  Y = O W_O + b_O
/// Legend: B batch, L sequence length, D = d_model, K = ceil(log2 max_len).
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "seqmix/nn/mixer.h"
#include "seqmix/ops/aib_scan.h"

namespace seqmix::nn {

struct AIBAttentionOptions {
  AIBAttentionOptions(int64_t d_model, int64_t max_len) : d_model_(d_model), max_len_(max_len) {}
  /// Width D of input, A, V and output.
  TORCH_ARG(int64_t, d_model);
  /// Longest sequence the layer accepts; sets K = ceil(log2 max_len) rows of w.
  TORCH_ARG(int64_t, max_len);
  /// Decoder (causal, Algorithm 1) or encoder (bidirectional, Algorithm 2).
  TORCH_ARG(bool, causal) = true;
  /// W parameterisation: prefix_exp (default), exp, or ones (PS attention).
  TORCH_ARG(ops::AIBWeights, weights) = ops::AIBWeights::prefix_exp;
  /// Biases on A and V (Moss has them; AIB-Net / Weird-Net do not).
  TORCH_ARG(bool, bias_av) = false;
  /// Scan implementation: the fused CPU kernel (default) or the literal reference.
  TORCH_ARG(ops::Backend, backend) = ops::Backend::kernel;
  /// Number of stacked layers N, used only for the W_O init std sqrt((1 - 2/D) / (2 N D)).
  TORCH_ARG(int64_t, n_layers) = 1;
};

/// Parameters: `w_a`, `w_v` (Linear D->D), `w` [K, D], `w_o` (Linear D->D, with bias).
/// Init (weird-net Sec. III.G): W_A, W_V ~ N(0, 1/D); w ~ N(0, 1);
/// W_O ~ N(0, (1 - 2/D) / (2 N D)); biases 0.
/// Decoding state: tensors {E V cache [B, t, D], E cache [B, t, D], a_d reversed [max_len, D],
/// running max of A [B, 1, D]} with E_j = exp(A_j - max); each step costs O(t D) (like a KV
/// cache: the distance weights of every earlier token change with each new token), and
/// exponentiates only the new token's A unless a channel's maximum grows.
///
/// Example:
///   namespace sn = seqmix::nn;
///   sn::AIBAttention aib(sn::AIBAttentionOptions(/*d_model=*/64, /*max_len=*/256)
///                            .causal(true)
///                            .weights(seqmix::ops::AIBWeights::prefix_exp));
///   at::Tensor y = aib(torch::randn({2, 100, 64}), at::Tensor());  // no mask: [2, 100, 64]
///   seqmix::nn::MixerState s = aib->init_state(2);
///   at::Tensor y0 = aib->step(torch::randn({2, 64}), s);  // one decoding step, [2, 64]
class AIBAttentionImpl : public Mixer<AIBAttentionImpl> {
 public:
  explicit AIBAttentionImpl(AIBAttentionOptions options);
  /// (Re)creates w_a, w_v, w_o and w from the options and initialises them; clone() relies
  /// on it.
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  /// x [B, L, D], mask [B, L] bool or undefined -> [B, L, D].
  /// @throws c10::Error if L > max_len or D != d_model.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) override;
  MixerState init_state(int64_t batch) const override;
  at::Tensor step(const at::Tensor& x_t, MixerState& state) override;
  bool causal() const override { return options.causal(); }

  AIBAttentionOptions options;
  torch::nn::Linear w_a{nullptr}, w_v{nullptr}, w_o{nullptr};
  at::Tensor w;  ///< [K, D] distance-level parameters.
};
TORCH_MODULE(AIBAttention);

}  // namespace seqmix::nn
