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

/// The reference's log-depth scan carrying a maximum per position (m, H e^-m, U e^-m)
/// instead of one per sequence, in ATen: exact for any finite A -- no term underflows
/// unless it is negligible where it is summed -- where the reference's single maximum
/// underflows every window far below it (|A| in the thousands). The fused kernel falls back
/// to it for A outside its exponent range; NaN in A or V gives NaN in the windows that hold
/// it. Same contract as aib_scan_reference; about 3x its cost.
at::Tensor aib_scan_stable(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                           const at::Tensor& mask, Direction direction, AIBWeights weights);

}  // namespace seqmix::ops
