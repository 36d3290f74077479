#pragma once
/// @file mixer.h
/// The interface every sequence mixer implements (docs/ARCHITECTURE.md, "Layers"): a full-sequence
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
///
/// torch::nn::Module is a virtual base, as it is of torch::nn::Cloneable: a concrete mixer
/// derives from both, `class FooImpl : public torch::nn::Cloneable<FooImpl>, public
/// MixerImpl`, so that `clone()` deep-copies it while models hold it as
/// std::shared_ptr<MixerImpl>. Being virtual, Module is constructed by the most derived class:
/// that class names the module (`torch::nn::Module("Foo")` in its constructor's initialiser
/// list); the name given to MixerImpl's constructor is not used then. Cloneable requires
/// `reset()` to register every parameter and submodule, so constructors only store the
/// options and call it.
///
/// Example:
///   std::shared_ptr<seqmix::nn::MixerImpl> mixer =
///       seqmix::nn::AIBAttention(seqmix::nn::AIBAttentionOptions(64, 256)).ptr();
///   at::Tensor y = mixer->forward(torch::randn({2, 10, 64}), at::Tensor());  // [2, 10, 64]
///   auto copy = std::dynamic_pointer_cast<seqmix::nn::MixerImpl>(mixer->clone());
class MixerImpl : public virtual torch::nn::Module {
 public:
  MixerImpl() = default;
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
