#pragma once
/// @file precision.h
/// Mixed-precision compute (train.precision, --precision): the usual recipe of PyTorch's
/// `torch.autocast(device_type="cpu", dtype=torch.bfloat16)`, run through LibTorch's own CPU
/// autocast (and CUDA autocast, for models on a GPU), which seqmix only switches on and off.
///
/// With Precision::bf16, inside an AutocastGuard:
///   - parameters, their gradients and the optimizer state stay float32 (master weights);
///   - matrix products (Linear, matmul, bmm) cast their operands to bfloat16 and return
///     bfloat16; on CPUs with AVX512-BF16 or AMX they run oneDNN's bf16 GEMMs
///     (util::onednn_description says which);
///   - the residual stream stays float32 (embeddings are float32, and float32 + bfloat16
///     promotes to float32), so LayerNorm, pooling and every reduction over it run in float32;
///   - the seqmix kernels (AIB scan, CES scan, attention, Extractor convolution) take the
///     bfloat16 activations with float32 parameters, accumulate in float32 and return
///     bfloat16 (include/seqmix/ops/);
///   - logits are converted to float32 before the loss (train/objective.h), and the softmax
///     statistics of attention are float32 inside its kernel.
/// Gradients flow back in the dtype of each forward tensor; those of the float32 parameters
/// arrive in float32.
///
/// Example:
///   const seqmix::nn::Precision p = seqmix::nn::parse_precision("bf16");
///   {
///     seqmix::nn::AutocastGuard guard(p);
///     const at::Tensor loss = model->forward(tokens, {}).to(at::kFloat).mean();
///     loss.backward();  // parameters' .grad() are float32
///   }
#include <ATen/ATen.h>

#include <string>

namespace seqmix::nn {

/// The compute precision of a run.
enum class Precision {
  fp32,  ///< everything in float32 (the default)
  bf16,  ///< bfloat16 matrix products and activations, float32 weights and statistics
};

/// Parses "fp32" | "bf16". @throws std::invalid_argument naming the value and the choices.
Precision parse_precision(const std::string& name);
/// "fp32" | "bf16".
std::string to_string(Precision precision);

/// Enables LibTorch's CPU autocast with bfloat16 for its lifetime when `precision` is bf16
/// (fp32: does nothing), restoring the previous autocast state (enabled flag and dtype) and
/// dropping autocast's cache of cast weights when it ends. The state is thread-local, as
/// torch.autocast's is: a guard covers the forward passes run on its thread. Nest freely.
class AutocastGuard {
 public:
  explicit AutocastGuard(Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
  bool prev_cuda_enabled_ = false;
  at::ScalarType prev_cuda_dtype_ = at::kBFloat16;
};

}  // namespace seqmix::nn
