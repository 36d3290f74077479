#pragma once
/// @file self_attention.h
/// Multi-head softmax self-attention (Vaswani et al. 2017, eq. 1; GPT-2 layout), the baseline
/// every paper compares against and the even-numbered mixer of Weird-Net Structure B.
///   Q, K, V = X W_qkv + b;  head_h = softmax(Q_h K_h^T / sqrt(d_head) + mask) V_h
///   Y = concat(heads) W_O + b_O
/// Legend: B batch, L sequence length, D = d_model, H = n_heads, d_head = D / H.
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "seqmix/nn/mixer.h"
#include "seqmix/ops/attention.h"

namespace seqmix::nn {

struct SelfAttentionOptions {
  SelfAttentionOptions(int64_t d_model, int64_t n_heads) : d_model_(d_model), n_heads_(n_heads) {}
  TORCH_ARG(int64_t, d_model);
  /// Number of heads H; must divide d_model.
  TORCH_ARG(int64_t, n_heads);
  /// Causal (decoder) or bidirectional (encoder).
  TORCH_ARG(bool, causal) = true;
  /// Dropout on the attention probabilities (training only).
  TORCH_ARG(double, dropout) = 0.0;
  /// Biases of the QKV and output projections.
  TORCH_ARG(bool, bias) = true;
  /// Number of stacked layers N, for the output-projection init (as W_O of AIB attention).
  TORCH_ARG(int64_t, n_layers) = 1;
  /// Compute softmax(QK^T)V with at::scaled_dot_product_attention (PyTorch's SDPA, whose
  /// CPU backend is a flash-attention kernel) whenever no key-padding mask is given, also
  /// with dropout in training (SDPA's own dropout) and with the reference backend.
  TORCH_ARG(bool, use_sdpa) = false;
  /// softmax(QK^T)V by the fast path or the literal ATen reference ([B, H, L, L] scores).
  /// The fast path (kernel) is PyTorch's SDPA when no mask is given (faster than seqmix's
  /// own kernel on the CPU, docs/BENCHMARKS.md) and seqmix's fused kernel (ops/attention.h;
  /// O(L) memory, padded rows 0) with a mask. Dropout > 0 in training always runs the
  /// reference (unless use_sdpa).
  TORCH_ARG(ops::Backend, backend) = ops::Backend::kernel;
};

/// Parameters: `qkv` (Linear D -> 3D), `out` (Linear D -> D). Init: qkv ~ N(0, 1/D),
/// out ~ N(0, (1 - 2/D) / (2 N D)), biases 0 (the AIB family's rule, so baselines match).
/// Decoding state: tensors {K cache [B, H, t, d_head], V cache [B, H, t, d_head]}.
///
/// Example:
///   seqmix::nn::SelfAttention attn(
///       seqmix::nn::SelfAttentionOptions(/*d_model=*/64, /*n_heads=*/4).causal(false));
///   at::Tensor x = torch::randn({2, 100, 64});
///   at::Tensor mask = torch::ones({2, 100}, torch::kBool);  // true = a real token
///   at::Tensor y = attn(x, mask);                          // [2, 100, 64]
class SelfAttentionImpl : public Mixer<SelfAttentionImpl> {
 public:
  explicit SelfAttentionImpl(SelfAttentionOptions options);
  /// (Re)creates qkv and out from the options and initialises them; clone() relies on it.
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  /// x [B, L, D], mask [B, L] bool (key padding; true = valid) or undefined -> [B, L, D].
  /// A query whose every key is masked attends to nothing (its heads are 0, so its output is
  /// the output projection's bias), and 0 if it is itself padded.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) override;
  MixerState init_state(int64_t batch) const override;
  at::Tensor step(const at::Tensor& x_t, MixerState& state) override;
  bool causal() const override { return options.causal(); }

  SelfAttentionOptions options;
  torch::nn::Linear qkv{nullptr}, out{nullptr};
};
TORCH_MODULE(SelfAttention);

}  // namespace seqmix::nn
