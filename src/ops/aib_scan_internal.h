#pragma once
// Shared by the reference and the fused AIB scan (not a public header).
#include "seqmix/ops/aib_scan.h"

namespace seqmix::ops {

/// Validates the aib_scan arguments; every message starts with `fn` and names the argument.
void aib_check_inputs(const char* fn, const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                      const at::Tensor& mask, Direction direction, AIBWeights weights);

}  // namespace seqmix::ops
