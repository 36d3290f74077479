#pragma once
/// @file model_config.h
/// Everything that fixes a model's architecture: the fields every model shares, plus one
/// section per mixer family, each declaring its fields once (util/fields.h). In TOML:
///
///   [model]            shared: sizes, mixers, norms, FFN, heads
///   [model.aib]        AIB attention (weird-net / aib-net / moss)
///   [model.attention]  softmax self-attention
///   [model.ces]        complex exponential smoothing (ETSMLP)
///   [model.extractor]  the Extractor
///
/// Example:
///   seqmix::models::ModelConfig c;           // weird-net, mini
///   c.aib.weights = "exp";                   // [model.aib] weights = "exp"
///   c.mixers = {"aib"};                      // Structure A
///   c.validate();                            // throws std::invalid_argument if inconsistent
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "seqmix/util/fields.h"

namespace seqmix::models {

/// [model.aib]: AIB attention, alias Weird attention (weird-net Sec. III, aib-net, moss).
struct AIBConfig {
  std::string weights = "prefix_exp";  ///< per-distance weights W: prefix_exp | exp | ones
  bool bias = false;                   ///< biases on A and V (moss)
  std::string impl = "kernel";         ///< kernel (fused CPU scan) | reference (ATen ops)
  static const std::vector<util::Field<AIBConfig>>& fields();
};

/// [model.attention]: softmax self-attention (the Transformer baseline). Its head count is
/// the shared model.n_heads (the size presets set it, as GPT-2's configurations do).
struct AttentionConfig {
  std::string impl = "kernel";  ///< kernel (fused, O(L) memory) | reference (ATen ops)
  static const std::vector<util::Field<AttentionConfig>>& fields();
};

/// [model.ces]: the ESMLP block of ETSMLP (etsmlp Sec. 3.2), width model.d_ff.
struct CESConfig {
  bool gate = false;                      ///< ESMLP-Gate
  std::string shortcut = "omega";         ///< omega (authors' code) | sigmoid (eq. 13) | none
  bool normalize = false;                 ///< kernel x sqrt(1 - |mu|^2) (appendix B, LRU)
  double r_min = 0.1;                     ///< ring init of lambda (Table 4's best ring)
  double r_max = 0.9;
  double max_phase = 6.283185307179586;   ///< radians
  double max_lambda = 0.9999;             ///< |mu| bound (eq. 12)
  std::string impl = "kernel";            ///< kernel (recurrence) | reference (FFT)
  bool alpha = true;   ///< learned damping exponent alpha (false: Table 3's "No alpha")
  bool beta = true;    ///< learned input factor beta (false: Table 3's "No beta")
  bool real = false;   ///< real lambda, alpha, beta (Table 3's "Real")
  static const std::vector<util::Field<CESConfig>>& fields();
};

/// [model.extractor]: the Extractor (extractor eqs. 18-20); model.max_len is its number of
/// lag matrices l.
struct ExtractorConfig {
  bool adjust = true;           ///< the adjustment (X W_adj) * ext (eq. 19)
  bool out_proj = true;         ///< the optional W_opt (eq. 20)
  std::string impl = "kernel";  ///< kernel (FFT convolution) | reference (per-lag sum)
  static const std::vector<util::Field<ExtractorConfig>>& fields();
};

/// Resolved from a preset, then a config file, then command-line overrides (see
/// train/config.h), and stored in every checkpoint.
struct ModelConfig {
  std::string preset = "weird-net";  ///< preset the config came from (models/presets.h)
  std::string size = "mini";         ///< size the config came from
  int64_t vocab_size = 256;          ///< V: 256 for byte-level models
  int64_t d_model = 128;             ///< D
  int64_t n_layers = 4;              ///< N
  int64_t n_heads = 4;               ///< heads of every self-attention mixer
  int64_t d_ff = 512;                ///< FFN inner width (ESMLP: its hidden width H)
  int64_t max_len = 256;             ///< longest sequence (learned positions, AIB levels)
  /// Mixer of layer i (0-based) is mixers[i % mixers.size()], each a name in the mixer
  /// registry (models/mixer_registry.h): aib, attention, extractor, etsmlp, ...
  /// {"aib", "attention"} is Structure B (AIB in the 1st, 3rd, ... layers), {"aib"} Structure A.
  std::vector<std::string> mixers = {"aib", "attention"};
  bool causal = true;               ///< causal (decoder) or bidirectional (encoder)
  std::string activation = "gelu";  ///< FFN activation: gelu | leaky_relu | relu
  bool pre_norm = true;             ///< pre-norm (GPT-2) or post-norm blocks
  double dropout = 0.0;             ///< residual, FFN and attention dropout
  bool tie_embeddings = true;       ///< LM head shares the token embedding matrix
  bool norm = true;  ///< norms in every block and before the head (false: none at all)
  bool bias = true;  ///< biases of the FFN and self-attention projections
  /// Block norms: "layer" (LayerNorm) or "batch" (BatchNorm, etsmlp Table 5's BN tasks).
  std::string norm_type = "layer";
  /// Classes of the classification head (Linear D -> n_classes on `pooled`); 0: none.
  int64_t n_classes = 0;
  /// Pair classification (LRA Retrieval's two-tower model): pooled u, v combined as
  /// [u, v, u*v, u-v] and classified by an MLP (Linear 4D -> D, ReLU, Linear D -> n_classes).
  bool cls_pair = false;

  AIBConfig aib;
  AttentionConfig attention;
  CESConfig ces;
  ExtractorConfig extractor;

  /// The shared fields ([model]).
  static const std::vector<util::Field<ModelConfig>>& fields();

  /// Checks every field of every section (whatever the mixers, so a stored configuration
  /// never carries a NaN), then each mixer's own constraints through the registry: sizes
  /// >= 1 (d_model >= 2), dropout in [0, 1), known mixer, norm, activation and
  /// implementation names, directions the mixers support.
  /// @throws std::invalid_argument "model.<key>: <what was expected>, got <value>" (sections
  ///         as "model.ces.r_min") for the first invalid field.
  void validate() const;
  /// Exact number of trainable parameters, computed without building the model (and without
  /// iterating over the layers, so a huge n_layers costs nothing).
  /// @throws std::overflow_error if the count does not fit in int64.
  /// @throws std::invalid_argument for an unknown mixer name.
  int64_t num_parameters() const;
  /// num_parameters() as a double, for any sizes: never overflows (exact below 2^53).
  /// @throws std::invalid_argument for an unknown mixer name.
  double num_parameters_approx() const;
  /// Calls f(path, section, fields) for [model] itself (path "") and then each mixer
  /// section ("aib", "attention", "ces", "extractor"): the one list of sections that
  /// generic code (validation, TOML, presets) walks. Works on const and non-const configs.
  template <class Config, class F>
  static void visit_sections(Config& c, F&& f) {
    f(std::string(), c, fields());
    f(std::string("aib"), c.aib, AIBConfig::fields());
    f(std::string("attention"), c.attention, AttentionConfig::fields());
    f(std::string("ces"), c.ces, CESConfig::fields());
    f(std::string("extractor"), c.extractor, ExtractorConfig::fields());
  }
  /// Layers using mixers[j]: i in [0, n_layers) with i % mixers.size() == j.
  int64_t layers_of(size_t j) const;
};

}  // namespace seqmix::models
