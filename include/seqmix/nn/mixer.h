#pragma once
/// @file mixer.h
/// The interface every sequence mixer implements (docs/ARCHITECTURE.md, "Layers"): a full-sequence
/// `forward` for training and an incremental `step` for decoding, which must agree on the
/// same prefix.
#include <torch/nn/module.h>
#include <torch/csrc/autograd/grad_mode.h>

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
/// MixerImpl is a torch::nn::Module, so models hold any mixer as std::shared_ptr<MixerImpl>
/// and register it as a submodule. A concrete mixer derives from `Mixer<FooImpl>` (below),
/// which gives it `clone()` as torch::nn::Cloneable does for other modules (LibTorch's
/// Cloneable derives from Module itself, so a class cannot be both Cloneable and a
/// MixerImpl). The concrete class names the module (`Mixer<FooImpl>("Foo")` in its
/// constructor's initialiser list); `clone()` requires `reset()` to register every parameter
/// and submodule, so constructors only store the options and call it.
///
/// Example:
///   std::shared_ptr<seqmix::nn::MixerImpl> mixer =
///       seqmix::nn::AIBAttention(seqmix::nn::AIBAttentionOptions(64, 256)).ptr();
///   at::Tensor y = mixer->forward(torch::randn({2, 10, 64}), at::Tensor());  // [2, 10, 64]
///   auto copy = std::dynamic_pointer_cast<seqmix::nn::MixerImpl>(mixer->clone());
class MixerImpl : public torch::nn::Module {
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

/// The base of a concrete mixer `FooImpl`: MixerImpl plus a deep `clone()` with
/// torch::nn::Cloneable's contract (a new FooImpl whose parameters and buffers, at every
/// depth, are copies of this one's, optionally on `device`). FooImpl has a public `options`
/// member and a constructor from it that calls `reset()`.
template <typename Derived>
class Mixer : public MixerImpl {
 public:
  using MixerImpl::MixerImpl;
  /// Registers every parameter, buffer and submodule (called by the constructor).
  virtual void reset() = 0;

  std::shared_ptr<torch::nn::Module> clone(
      const std::optional<torch::Device>& device = std::nullopt) const override {
    torch::NoGradGuard no_grad;
    // A new mixer from the same options: its constructor's reset() registers fresh
    // parameters, buffers and submodules, which then receive this one's values.
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this).options);
    copy->train(is_training());
    auto copied = [&](const at::Tensor& t) {
      return device && t.device() != *device ? t.to(*device) : t.clone();
    };
    // Submodules are made afresh by reset() from the options; their values are copied by
    // name, at every depth (Module::clone_, which Cloneable uses for this, is private).
    const auto params = named_parameters(/*recurse=*/true);
    const auto bufs = named_buffers(/*recurse=*/true);
    auto copy_params = copy->named_parameters(/*recurse=*/true);
    auto copy_bufs = copy->named_buffers(/*recurse=*/true);
    TORCH_CHECK(copy_params.size() == params.size() && copy_bufs.size() == bufs.size(),
                name(), "::reset() must register every parameter, buffer and submodule");
    for (const auto& p : params) copy_params[p.key()].set_data(copied(p.value()));
    for (const auto& b : bufs) copy_bufs[b.key()].set_data(copied(b.value()));
    return copy;
  }

 private:
  // Module::clone_ (private, virtual): a Cloneable parent's clone() calls it on the fresh
  // mixer its reset() made, to turn it into a deep copy of `other` (the original mixer).
  void clone_(torch::nn::Module& other, const std::optional<torch::Device>& device) final {
    auto copy = std::dynamic_pointer_cast<Derived>(other.clone(device));
    TORCH_CHECK(copy, "clone(): ", other.name(), " is not a ", name());
    static_cast<Derived&>(*this) = std::move(*copy);
  }
};

}  // namespace seqmix::nn
