#include "seqmix/nn/precision.h"

#include <ATen/autocast_mode.h>

#include <stdexcept>

namespace seqmix::nn {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  throw std::invalid_argument("unknown precision '" + name + "' (expected fp32 or bf16)");
}

std::string to_string(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp32";
}

AutocastGuard::AutocastGuard(Precision precision) {
  if (precision != Precision::bf16) return;
  active_ = true;
  prev_enabled_ = at::autocast::is_autocast_enabled(at::kCPU);
  prev_dtype_ = at::autocast::get_autocast_dtype(at::kCPU);
  prev_cuda_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
  prev_cuda_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
  // Both devices' flags: the guard does not know where the model runs, and a flag is only
  // thread-local state (on a machine without a GPU the CUDA one is never read).
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  // torch.autocast's __enter__ does the same: the nesting count tells the outermost exit
  // when to drop the cache of weights cast to bfloat16.
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // The cache holds bfloat16 copies of the weights for this forward pass; after an optimizer
  // step they would be stale.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCPU, prev_enabled_);
  at::autocast::set_autocast_dtype(at::kCPU, prev_dtype_);
  at::autocast::set_autocast_enabled(at::kCUDA, prev_cuda_enabled_);
  at::autocast::set_autocast_dtype(at::kCUDA, prev_cuda_dtype_);
}

}  // namespace seqmix::nn
