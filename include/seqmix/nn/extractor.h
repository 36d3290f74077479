#pragma once
/// @file extractor.h
/// The Extractor (extractor, Sec. 5, Fig. 3): a drop-in replacement for self-attention.
///   ext = extractor_conv(X, W_ext)        eq. 18, one D x D matrix per relative lag
///   adj = (X W_adj) * ext                  eq. 19, element-wise adjustment (optional here)
///   Y   = adj W_opt                        eq. 20, optional linear map
/// No biases (the paper disables all of them). Causal only.
/// Legend: B batch, t sequence length (<= max_len = l), D = d_model.
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "seqmix/nn/mixer.h"
#include "seqmix/ops/extractor_conv.h"

namespace seqmix::nn {

struct ExtractorOptions {
  ExtractorOptions(int64_t d_model, int64_t max_len) : d_model_(d_model), max_len_(max_len) {}
  /// Width D of input and output.
  TORCH_ARG(int64_t, d_model);
  /// l: number of lag matrices = the longest sequence accepted (the context window).
  TORCH_ARG(int64_t, max_len);
  /// The adjustment (X W_adj) * ext of eq. 19; without it the layer outputs ext (Fig. 8).
  TORCH_ARG(bool, adjust) = true;
  /// The optional W_opt of eq. 20 (Figs. 6-7 compare with and without it).
  TORCH_ARG(bool, out_proj) = true;
  /// kernel (the FFT convolution, default) or the literal per-lag reference.
  TORCH_ARG(ops::Backend, backend) = ops::Backend::kernel;
  /// Number of stacked layers m, for the W_opt init (see ExtractorImpl).
  TORCH_ARG(int64_t, n_layers) = 1;
};

/// Parameters: `w_ext` [l, D, D]; `w_adj` (Linear D->D, no bias) if adjust; `w_opt` (Linear
/// D->D, no bias) if out_proj.
/// Initialisation (the paper gives none; chosen so a deep stack without normalisation keeps
/// its activation scale, checked in tests at depth 6): W_ext[k] ~ N(0, 1 / (l D)), so ext at
/// a full window has about the variance of x; W_adj ~ N(0, 1 / D), so X W_adj has it too and
/// the product keeps it; W_opt ~ N(0, 1 / (2 m D)) so the m residual branches of a stack add
/// variance ~1/2 in total (GPT-2's residual scaling).
/// Decoding state: tensors {x history [B, t, D]}; a step costs O(t D^2), eq. 18 at the newest
/// position, like the paper's Table 4.
///
/// Example:
///   seqmix::nn::Extractor ext(
///       seqmix::nn::ExtractorOptions(/*d_model=*/64, /*max_len=*/128).out_proj(false));
///   at::Tensor y = ext(torch::randn({2, 128, 64}), at::Tensor());  // [2, 128, 64]
///   auto copy = std::dynamic_pointer_cast<seqmix::nn::ExtractorImpl>(ext->clone());
class ExtractorImpl : public Mixer<ExtractorImpl> {
 public:
  explicit ExtractorImpl(ExtractorOptions options);
  /// (Re)creates w_ext, w_adj and w_opt (as the options ask) and initialises them; clone()
  /// relies on it.
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;
  /// x [B, t, D], mask [B, t] bool or undefined -> [B, t, D]. Padded positions are zeroed
  /// before the convolution, so they contribute nothing, and their outputs are 0.
  /// @throws std::invalid_argument if t > max_len or D != d_model.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) override;
  MixerState init_state(int64_t batch) const override;
  at::Tensor step(const at::Tensor& x_t, MixerState& state) override;
  bool causal() const override { return true; }

  ExtractorOptions options;
  at::Tensor w_ext;  ///< [l, D, D]
  torch::nn::Linear w_adj{nullptr}, w_opt{nullptr};

 private:
  at::Tensor finish(const at::Tensor& x, const at::Tensor& ext);
};
TORCH_MODULE(Extractor);

}  // namespace seqmix::nn
