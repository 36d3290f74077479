#pragma once
/// @file mixer.h
/// The interface every sequence mixer implements (DESIGN.md, "Layers"): a full-sequence
/// `forward` for training and an incremental `step` for decoding, which must agree on the
/// same prefix.
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

namespace seqmix::nn {

/// Per-sequence decoding state of one mixer. `pos` counts the tokens already consumed;
/// `tensors` holds whatever caches the mixer needs (documented by each mixer).
struct MixerState {
  std::vector<at::Tensor> tensors;
  int64_t pos = 0;
};

/// A sequence mixer: maps [B, L, D] to [B, L, D], position i seeing what its direction allows.
class MixerImpl : public torch::nn::Module {
 public:
  explicit MixerImpl(std::string name) : torch::nn::Module(std::move(name)) {}
  ~MixerImpl() override;
  /// @param x    [B, L, D] input.
  /// @param mask [B, L] bool (true = valid) or undefined. Padded positions contribute nothing
  ///             to any output and their own outputs are finite.
  /// @return     [B, L, D].
  virtual at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) = 0;
  /// Empty decoding state for `batch` sequences.
  /// @throws std::logic_error for a bidirectional mixer (it cannot decode incrementally).
  virtual MixerState init_state(int64_t batch) const = 0;
  /// Consumes one token per sequence: x_t [B, D] -> y_t [B, D], equal to row `state.pos` of
  /// `forward` on the whole prefix; advances `state.pos`.
  virtual at::Tensor step(const at::Tensor& x_t, MixerState& state) = 0;
  /// True if position i only sees positions <= i.
  virtual bool causal() const = 0;
};

}  // namespace seqmix::nn
