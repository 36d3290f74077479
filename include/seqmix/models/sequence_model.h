#pragma once
/// @file sequence_model.h
/// The stack shared by every model family (weird-net Sec. III.E, Fig. 4; GPT-2 for the
/// Transformer baseline): token embedding + learned positional embedding, N blocks
/// [norm -> mixer -> residual, norm -> FFN -> residual], final norm, language-model head.
/// Legend: B batch, L sequence length (<= max_len), D = d_model, V = vocab_size.
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <string>
#include <vector>

#include "seqmix/models/model_config.h"
#include "seqmix/nn/block.h"

namespace seqmix::models {

/// A stack of blocks with embeddings and an LM head. Layer i's mixer is built by the mixer
/// registry's row for config.mixers[i % mixers.size()] (models/mixer_registry.h).
///
/// Example:
///   seqmix::models::ModelConfig c;  // weird-net (Structure B), mini
///   seqmix::models::SequenceModel model(c);
///   at::Tensor logits = model->forward(at::randint(256, {2, 16}));  // [2, 16, 256]
/// Init (weird-net Sec. III.G): token and position embeddings ~ N(0, 1/D); see each layer.
class SequenceModelImpl : public torch::nn::Module {
 public:
  explicit SequenceModelImpl(ModelConfig config);

  /// Hidden states after the final norm: tokens [B, L] int64 in [0, V), mask [B, L] bool or
  /// undefined -> [B, L, D]. @throws c10::Error if L > max_len or a token is out of range.
  at::Tensor hidden(const at::Tensor& tokens, const at::Tensor& mask = {});
  /// Next-token logits: tokens [B, L] -> [B, L, V].
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& mask = {});
  /// One vector per sequence for classification (aib-net and etsmlp's LRA
  /// models): an encoder (causal = false) mean-pools the final hidden states over the valid
  /// positions, a decoder takes the hidden state at the last valid position.
  /// tokens [B, L], mask [B, L] bool (undefined: all valid) -> [B, D].
  /// @throws c10::Error if a sequence has no valid position.
  at::Tensor pooled(const at::Tensor& tokens, const at::Tensor& mask = {});
  /// Class logits: tokens [B, L], mask [B, L] -> [B, n_classes] (cls_head on `pooled`).
  /// @throws c10::Error if the model has no classification head (n_classes = 0).
  at::Tensor classify(const at::Tensor& tokens, const at::Tensor& mask = {});
  /// Pair class logits (cls_pair models): tokens_a [B, La], mask_a [B, La], tokens_b [B, Lb],
  /// mask_b [B, Lb] -> [B, n_classes].
  /// @throws c10::Error if the model is not a pair classifier.
  at::Tensor classify_pair(const at::Tensor& tokens_a, const at::Tensor& mask_a,
                           const at::Tensor& tokens_b, const at::Tensor& mask_b);

  /// Decoding state: one MixerState per block. @throws std::logic_error for an encoder, or
  /// a mixer whose registry row is not `incremental`.
  std::vector<nn::MixerState> init_state(int64_t batch) const;
  /// Consumes token [B] (int64) at position states[0].pos and returns logits [B, V].
  /// @throws c10::Error when the position reaches max_len.
  at::Tensor step(const at::Tensor& token, std::vector<nn::MixerState>& states);

  const ModelConfig& config() const { return config_; }

  torch::nn::Embedding tok_emb{nullptr};
  at::Tensor pos_emb;  ///< [max_len, D]
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm_f{nullptr};  ///< null when config.norm is false
  torch::nn::Linear head{nullptr};  ///< only when !tie_embeddings
  torch::nn::Linear cls_head{nullptr};  ///< only when n_classes > 0 (weights N(0, 1/D), bias 0)
  torch::nn::Linear cls_pair_proj{nullptr};  ///< cls_pair: 4D -> D before the ReLU

 private:
  at::Tensor logits(const at::Tensor& h);
  ModelConfig config_;
};
TORCH_MODULE(SequenceModel);

}  // namespace seqmix::models
