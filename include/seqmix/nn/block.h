#pragma once
/// @file block.h
/// One layer of the stack (weird-net Sec. III.E, Fig. 4): [norm -> mixer -> residual,
/// norm -> FFN -> residual] in the pre-norm (GPT-2) arrangement by default, or post-norm
/// (x = norm(x + sublayer(x))) as an option. Shapes [B, L, D] -> [B, L, D].
/// Without an FFN the block is [norm -> mixer -> residual] only: the ETSMLP block, whose
/// mixer (nn::ESMLP) is itself the MLP (etsmlp Fig. 2).
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/normalization.h>

#include <string>

#include <memory>

#include "seqmix/nn/feed_forward.h"
#include "seqmix/nn/mixer.h"

namespace seqmix::nn {

/// Example:
///   namespace sn = seqmix::nn;
///   auto mixer = sn::SelfAttention(sn::SelfAttentionOptions(64, 4)).ptr();
///   sn::Block block(mixer, sn::FeedForwardOptions(64, 256), /*pre_norm=*/true, /*dropout=*/0.1);
///   at::Tensor y = block(torch::randn({2, 100, 64}), at::Tensor());  // [2, 100, 64]
///   sn::Block copy = sn::Block(std::dynamic_pointer_cast<sn::BlockImpl>(block->clone()));
class BlockImpl : public torch::nn::Cloneable<BlockImpl> {
 public:
  /// @param mixer     the sequence mixer of this layer (AIB attention, self-attention, ...).
  /// @param norm      norms in the block (false: none, as in the Extractor paper, Sec. 4).
  /// @param with_ffn  false: no FFN sublayer (and no second norm).
  /// @param norm_type "layer" (LayerNorm) or "batch" (BatchNorm over batch and positions,
  ///                  etsmlp Table 5's BN rows). @throws std::invalid_argument otherwise.
  BlockImpl(std::shared_ptr<MixerImpl> mixer, FeedForwardOptions ffn, bool pre_norm,
            double dropout, bool norm = true, bool with_ffn = true,
            const std::string& norm_type = "layer");
  /// Registers the mixer and (re)creates the FFN and the norms from the constructor's
  /// arguments. The mixer was built outside, from options this block does not know: the
  /// constructor's call registers the one it was given; in the copy that clone() makes, the
  /// call registers a deep copy of the original's (`mixer->clone()`, so the mixer must be
  /// Cloneable), so that two blocks never share a mixer.
  void reset() override;
  /// x [B, L, D], mask [B, L] bool or undefined -> [B, L, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask);
  /// One decoding step: x_t [B, D] -> [B, D] (see MixerImpl::step).
  at::Tensor step(const at::Tensor& x_t, MixerState& state);

  std::shared_ptr<MixerImpl> mixer;
  FeedForward ffn{nullptr};                               ///< null without an FFN
  torch::nn::LayerNorm norm_1{nullptr}, norm_2{nullptr};  ///< null without (layer) norms
  torch::nn::BatchNorm1d bn_1{nullptr}, bn_2{nullptr};    ///< the batch-norm variant
  bool pre_norm;
  double dropout;

 private:
  at::Tensor drop(const at::Tensor& x);
  at::Tensor n1(const at::Tensor& x) { return apply_norm(norm_1, bn_1, x); }
  at::Tensor n2(const at::Tensor& x) { return apply_norm(norm_2, bn_2, x); }
  static at::Tensor apply_norm(torch::nn::LayerNorm& ln, torch::nn::BatchNorm1d& bn,
                               const at::Tensor& x);

  // What reset() builds from; the constructor's mixer until the first reset() takes it.
  std::shared_ptr<MixerImpl> given_mixer_;
  FeedForwardOptions ffn_options_;
  bool norm_ = true, with_ffn_ = true;
  std::string norm_type_;
};
TORCH_MODULE(Block);

}  // namespace seqmix::nn
