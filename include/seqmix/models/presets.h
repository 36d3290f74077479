#pragma once
/// @file presets.h
/// Named model presets and sizes, as data: a preset is one row (mixers, field overrides, a
/// training recipe, its role on classification tasks). `seqmix info`, the --model help and
/// the task recipes (train/configuration/task_presets.h) are generated from the rows; no
/// code compares preset names.
///
/// Presets (docs/ARCHITECTURE.md, "Models"):
///   weird-net    Structure B: AIB attention in layers 1, 3, ..., causal self-attention in
///                layers 2, 4, ...; GELU FFN; no biases on A/V (weird-net Sec. III.E).
///   aib-net      alias of weird-net (aib-net paper).
///   weird-net-a  Structure A: every mixer AIB attention.
///   moss         Structure B with Leaky-ReLU 0.01 FFN and biases on A and V (moss Sec. III).
///   transformer  every mixer softmax self-attention, GELU FFN (GPT-2 style baseline).
///   extractor-transformer, transformer-plain, etsmlp, etsmlp-gate, etsmlp-lm,
///   etsmlp-gate-lm: see the rows in presets.cpp (`seqmix info` prints them).
/// Sizes: small / medium / large follow weird-net Table VII (GPT-2 shapes, max_len 1024);
/// tiny / mini / base are CPU-sized and ours; table1 is the Extractor paper's Table 1.
///
/// Example:
///   auto c = seqmix::models::make_model_config("moss", "tiny");
///   // c.mixers == {"aib", "attention"}, c.activation == "leaky_relu",
///   // c.options<seqmix::nn::AIBAttentionOptions>("aib").bias_av()
#include <string>
#include <utility>
#include <vector>

#include "seqmix/models/model_config.h"
#include "seqmix/models/sequence_model.h"  // make_model_config's result is what SequenceModel takes

namespace seqmix::models {

struct SizePreset {
  std::string name;
  int64_t n_layers, d_model, d_ff, n_heads, max_len;
  std::string source;  ///< where the numbers come from
};

/// How a preset's model is set up on a classification task (data/tasks.h).
enum class TaskRole {
  decoder,  ///< causal, classifies from the last valid position (aib-net's AIB decoder)
  encoder,  ///< bidirectional, mean-pools the valid positions
};

/// Which published recipe a preset follows on the LRA tasks (train/configuration/task_presets.h).
enum class TaskRecipe {
  aib_net,  ///< AIB-Net Table II shapes and optimiser (all but ETSMLP)
  etsmlp,   ///< ETSMLP Table 5 (norm, LR, WD, dropout; its shapes at the paper size)
};

/// A (key, value) assignment to a configuration field: "activation" or "aib.bias" within
/// [model]; "train.lr", ... for training recipes.
using FieldAssignment = std::pair<std::string, util::FieldValue>;

struct ModelPreset {
  std::string name;
  std::string summary;   ///< one line, for `seqmix info` and --model help
  std::string source;    ///< paper and section
  std::string alias_of;  ///< non-empty: this name is another preset's alias
  /// Field overrides on the ModelConfig defaults, keys as in TOML under [model]
  /// ("mixers", "activation", "aib.bias", ...).
  std::vector<FieldAssignment> model;
  /// Training overrides for language modelling ("train.lr", ...): a paper's own optimiser.
  std::vector<FieldAssignment> lm_train;
  TaskRole task_role = TaskRole::decoder;
  TaskRecipe task_recipe = TaskRecipe::aib_net;
  /// Whether it is a language model (causal); else `lm_variant` names the preset to use
  /// for language modelling, if any.
  bool language_model = true;
  std::string lm_variant;
};

/// Every preset, aliases included, in the order `seqmix info` lists them.
const std::vector<ModelPreset>& model_presets();
/// The row named `name` (an alias's own row; its fields are those of its target).
/// @throws std::invalid_argument "unknown model preset 'x' (expected one of: ...)".
const ModelPreset& find_preset(const std::string& name);
/// Preset names, aliases included.
std::vector<std::string> family_names();
/// Every size preset.
const std::vector<SizePreset>& size_presets();
/// Applies `assignments` to `c` (keys as in ModelPreset::model).
/// @throws std::invalid_argument for an unknown key or a value of the wrong type.
void apply_model_fields(ModelConfig& c, const std::vector<FieldAssignment>& assignments);
/// The configuration of preset `family` at `size`.
/// @throws std::invalid_argument naming the unknown family or size and listing the choices.
ModelConfig make_model_config(const std::string& family, const std::string& size);

}  // namespace seqmix::models
