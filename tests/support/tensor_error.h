#pragma once
// Test support: how far a result is from the truth, measured one way in every test.
#include <ATen/ATen.h>

namespace seqmix::testing {

/// max |x - truth|, computed in float64.
inline double max_abs_err(const at::Tensor& x, const at::Tensor& truth) {
  if (x.numel() == 0) return 0.0;
  return (x.to(at::kDouble) - truth.to(at::kDouble)).abs().max().item<double>();
}

/// max |x - truth| / max |truth|: the error relative to the truth's scale, so one bound
/// serves outputs and gradients of any magnitude. Absolute where the truth is all zero
/// (e.g. L = 1 attention, whose output does not depend on q or k).
inline double rel_err(const at::Tensor& x, const at::Tensor& truth) {
  if (x.numel() == 0) return 0.0;
  const double scale = truth.to(at::kDouble).abs().max().item<double>();
  return max_abs_err(x, truth) / (scale > 0 ? scale : 1.0);
}

}  // namespace seqmix::testing
