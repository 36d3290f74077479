#pragma once
// Shared by the CES op's registrations (not a public header).
#include "seqmix/ops/ces_scan.h"

namespace seqmix::ops {

/// Validates the ces_scan arguments (x [B, L, H]; mu and c [C, 2] with C = H, or 2 H
/// bidirectional; dtypes; devices; mask); every message starts with `fn` and names the
/// argument.
void ces_check_scan(const char* fn, const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
                    const at::Tensor& mask, Direction direction);

}  // namespace seqmix::ops
