#pragma once
/// @file block.h
/// One layer of the stack (weird-net Sec. III.E, Fig. 4): [norm -> mixer -> residual,
/// norm -> FFN -> residual] in the pre-norm (GPT-2) arrangement by default, or post-norm
/// (x = norm(x + sublayer(x))) as an option. Shapes [B, L, D] -> [B, L, D].
#include <torch/nn/modules/normalization.h>

#include <memory>

#include "seqmix/nn/feed_forward.h"
#include "seqmix/nn/mixer.h"

namespace seqmix::nn {

class BlockImpl : public torch::nn::Module {
 public:
  /// @param mixer  the sequence mixer of this layer (AIB attention, self-attention, ...).
  /// @param norm   LayerNorms in the block (false: none, as in the Extractor paper, Sec. 4).
  BlockImpl(std::shared_ptr<MixerImpl> mixer, FeedForwardOptions ffn, bool pre_norm,
            double dropout, bool norm = true);
  /// x [B, L, D], mask [B, L] bool or undefined -> [B, L, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask);
  /// One decoding step: x_t [B, D] -> [B, D] (see MixerImpl::step).
  at::Tensor step(const at::Tensor& x_t, MixerState& state);

  std::shared_ptr<MixerImpl> mixer;
  FeedForward ffn{nullptr};
  torch::nn::LayerNorm norm_1{nullptr}, norm_2{nullptr};  ///< null when built without norms
  bool pre_norm;
  double dropout;

 private:
  at::Tensor drop(const at::Tensor& x);
  at::Tensor n1(const at::Tensor& x) { return norm_1 ? norm_1(x) : x; }
  at::Tensor n2(const at::Tensor& x) { return norm_2 ? norm_2(x) : x; }
};
TORCH_MODULE(Block);

}  // namespace seqmix::nn
