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

#include "seqmix/nn/block.h"
#include "seqmix/nn/feed_forward.h"
#include "seqmix/ops/aib_scan.h"

namespace seqmix::models {

/// Everything that fixes a model's architecture. Resolved from a preset, then a config file,
/// then command-line overrides (see train/config.h), and stored in every checkpoint.
struct ModelConfig {
  std::string preset = "weird-net";  ///< family name the config came from (informational)
  std::string size = "mini";         ///< size name the config came from (informational)
  int64_t vocab_size = 256;          ///< V: 256 for byte-level models
  int64_t d_model = 128;             ///< D
  int64_t n_layers = 4;              ///< N
  int64_t n_heads = 4;               ///< heads of every self-attention mixer
  int64_t d_ff = 512;                ///< FFN inner width
  int64_t max_len = 256;             ///< longest sequence (learned positions, AIB levels)
  /// Mixer of layer i (0-based) is mixers[i % mixers.size()]: "aib", "attention",
  /// "extractor" (the Extractor, whose max_len is its number of lag matrices l) or "etsmlp"
  /// (ESMLP: CES inside an MLP of width d_ff; its block has no separate FFN).
  /// {"aib", "attention"} is Structure B (AIB in the 1st, 3rd, ... layers), {"aib"} Structure A.
  std::vector<std::string> mixers = {"aib", "attention"};
  bool causal = true;                      ///< decoder (true) or encoder (false)
  std::string activation = "gelu";         ///< FFN activation: gelu | leaky_relu | relu
  std::string aib_weights = "prefix_exp";  ///< prefix_exp | exp | ones (PS attention)
  bool aib_bias = false;                   ///< biases on A and V (Moss)
  std::string aib_impl = "fused";          ///< fused (CPU kernel) | reference (literal ATen ops)
  bool pre_norm = true;                    ///< pre-norm (GPT-2) or post-norm blocks
  double dropout = 0.0;                    ///< residual, FFN and attention dropout
  bool tie_embeddings = true;              ///< LM head shares the token embedding matrix
  bool norm = true;    ///< LayerNorms in every block and before the head (false: none at all)
  bool bias = true;    ///< biases of the FFN and self-attention projections
  bool extractor_adjust = true;        ///< Extractor: the adjustment (X W_adj) * ext (eq. 19)
  bool extractor_out_proj = true;      ///< Extractor: the optional W_opt (eq. 20)
  std::string extractor_impl = "fft";  ///< Extractor convolution: fft | reference
  /// Softmax attention: kernel (fused, O(L) memory) | reference (literal ATen ops)
  std::string attention_impl = "kernel";
  /// Block norms: "layer" (LayerNorm) or "batch" (BatchNorm, etsmlp Table 5's BN tasks).
  std::string norm_type = "layer";
  /// ETSMLP mixers ("etsmlp": the ESMLP of etsmlp Sec. 3.2, hidden width d_ff, no separate
  /// FFN in its block). ESMLP-Gate:
  bool ces_gate = false;
  std::string ces_shortcut = "omega";  ///< omega (the authors' code) | sigmoid (eq. 13) | none
  bool ces_normalize = false;          ///< kernel times sqrt(1 - |mu|^2) (appendix B, LRU)
  double ces_r_min = 0.1;              ///< ring init of lambda (Table 4's best ring)
  double ces_r_max = 0.9;
  double ces_max_phase = 6.283185307179586;
  double ces_max_lambda = 0.9999;      ///< |mu| bound (eq. 12)
  std::string ces_impl = "kernel";     ///< kernel (recurrence) | reference (FFT)
  /// Classes of the classification head (Linear D -> n_classes on `pooled`); 0: none.
  int64_t n_classes = 0;
  /// Pair classification (LRA Retrieval's two-tower model): both sequences go through the
  /// same stack, their pooled vectors u, v are combined as [u, v, u*v, u-v] and classified by
  /// an MLP (Linear 4D -> D, ReLU, Linear D -> n_classes), as LRA's dual classifier head.
  bool cls_pair = false;

  /// Checks every field: sizes >= 1 (d_model >= 2), dropout in [0, 1), the CES ring and bounds
  /// finite and in range, known mixer, norm, activation and implementation names.
  /// @throws std::invalid_argument "model.<key>: <what was expected>, got <value>" for the first
  ///         invalid field.
  void validate() const;
  /// Exact number of trainable parameters, computed without building the model (and without
  /// iterating over the layers, so a huge n_layers costs nothing).
  /// @throws std::overflow_error if the count does not fit in int64 (possible only for a
  ///         configuration far beyond any memory; RunConfig::check_resources rejects those).
  int64_t num_parameters() const;
  /// num_parameters() as a double, for any sizes: never overflows or throws (exact below 2^53).
  double num_parameters_approx() const;
};

/// A stack of blocks with embeddings and an LM head.
/// Init (weird-net Sec. III.G): token and position embeddings ~ N(0, 1/D); see each layer.
class SequenceModelImpl : public torch::nn::Module {
 public:
  explicit SequenceModelImpl(ModelConfig config);

  /// Hidden states after the final norm: tokens [B, L] int64 in [0, V), mask [B, L] bool or
  /// undefined -> [B, L, D]. @throws c10::Error if L > max_len or a token is out of range.
  at::Tensor hidden(const at::Tensor& tokens, const at::Tensor& mask = {});
  /// Next-token logits: tokens [B, L] -> [B, L, V].
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& mask = {});
  /// One vector per sequence for classification (DESIGN.md; aib-net and etsmlp's LRA
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

  /// Decoding state: one MixerState per block. @throws std::logic_error for an encoder.
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
