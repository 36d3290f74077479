#pragma once
/// @file presets.h
/// Named model families and sizes.
///
/// Families (DESIGN.md, "Models"):
///   weird-net    Structure B: AIB attention in layers 1, 3, ..., causal self-attention in
///                layers 2, 4, ...; GELU FFN; no biases on A/V (weird-net Sec. III.E).
///   aib-net      alias of weird-net (aib-net paper).
///   weird-net-a  Structure A: every mixer AIB attention.
///   moss         Structure B with Leaky-ReLU 0.01 FFN and biases on A and V (moss Sec. III).
///   transformer  every mixer softmax self-attention, GELU FFN (GPT-2 style baseline).
/// Sizes: small / medium / large follow weird-net Table VII (GPT-2 shapes, max_len 1024);
/// tiny / mini / base are CPU-sized and ours.
#include <string>
#include <vector>

#include "seqmix/models/sequence_model.h"

namespace seqmix::models {

struct SizePreset {
  std::string name;
  int64_t n_layers, d_model, d_ff, n_heads, max_len;
  std::string source;  ///< where the numbers come from
};

/// Family names, aliases included.
std::vector<std::string> family_names();
/// Every size preset.
const std::vector<SizePreset>& size_presets();
/// The configuration of `family` at `size`.
/// @throws std::invalid_argument naming the unknown family or size and listing the choices.
ModelConfig make_model_config(const std::string& family, const std::string& size);

}  // namespace seqmix::models
