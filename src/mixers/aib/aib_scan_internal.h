#pragma once
// Shared by the reference and the fused AIB scan (not a public header).
#include "seqmix/ops/aib_scan.h"

namespace seqmix::ops {

/// The schemas' `str weights`: a wrong value is a ValueError naming `op` and the choices.
inline AIBWeights aib_weights_arg(const char* op, c10::string_view s) {
  if (s == "prefix_exp") return AIBWeights::prefix_exp;
  if (s == "exp") return AIBWeights::exp;
  if (s == "ones") return AIBWeights::ones;
  TORCH_CHECK_VALUE(false, op, ": weights must be 'prefix_exp', 'exp' or 'ones', got '",
                    std::string(s), "'");
}

/// Validates the aib_scan arguments; every message starts with `fn` and names the argument.
void aib_check_inputs(const char* fn, const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                      const at::Tensor& mask, Direction direction, AIBWeights weights);

/// aib_scan_reference's arithmetic (a maximum per position; exact for any finite A) with its
/// messages naming "aib_scan": the fused kernels fall back to it for A outside their exponent
/// range; NaN in A or V gives NaN in the windows that hold it.
at::Tensor aib_scan_stable(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                           const at::Tensor& mask, Direction direction, AIBWeights weights);

/// log W [max(K, 1), D] as the fused kernels take it (K = levels for L = A's length), in their
/// arithmetic type: float32 for bfloat16 A, A's dtype otherwise. The parameterisation of W
/// stays outside the kernels: aib_grad_w_from_log maps the gradient of log W back onto w.
at::Tensor aib_log_weights(const at::Tensor& w, const at::Tensor& a, AIBWeights weights);
at::Tensor aib_grad_w_from_log(const at::Tensor& glw, const at::Tensor& w, AIBWeights weights);

/// The gradients (dA, dV, dw; dw empty when w is undefined) of aib_scan_stable for the output
/// gradient `grad`, by autograd through its ATen ops, whatever the caller's grad mode and
/// dispatch state: the backward of the fused kernels (CPU and CUDA) where their fast
/// arithmetic cannot answer exactly.
std::tuple<at::Tensor, at::Tensor, at::Tensor> aib_scan_stable_backward(
    const at::Tensor& grad, const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
    const at::Tensor& mask, Direction direction, AIBWeights weights);

/// Fallback counting (aib_scan_fallbacks): the CUDA kernels register a reader of their device
/// counter when they are linked in; aib_note_fallbacks warns once per process when a count
/// shows a fallback.
using AIBFallbackReader = int64_t (*)();
void aib_register_cuda_fallback_reader(AIBFallbackReader reader);
void aib_note_fallbacks(int64_t count);
void aib_count_stable_fallback();

}  // namespace seqmix::ops
