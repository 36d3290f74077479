#pragma once
// CES recurrence kernels (forward and backward) on plain pointers; see
// include/seqmix/ops/ces_scan.h for the contract.
//
// Layout: x, y, grad_* are [B, L, H] contiguous; mu, c are [C][2] (real, imaginary) with
// C = H (causal) or 2 H (bidirectional: rows H + h are channel h's backward parameters);
// mask is [B, L] (1 = valid) or null; grad_mu, grad_c are [B][C][2] per-sequence partial
// sums in double (the caller reduces over B).
//
// A work item is one sequence and a run of up to kCESChannels adjacent channels: every step
// reads and writes one contiguous piece of a row, and the complex states of the run live in
// a few small arrays, so the inner loops vectorise over channels.
//
// Precision: T is the arithmetic type (float, double), S the activations' storage type:
// T itself, or bfloat16 with T = float (mixed precision). With bfloat16, every element is
// widened as it is read and rounded once as it is written; the bidirectional form, whose
// suffix pass adds to the prefix pass's result, keeps that result in a float buffer
// (`acc`, ces_scratch_elems) so that nothing is rounded twice.
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <type_traits>

namespace seqmix::ops::cpu {

constexpr int64_t kCESChannels = 256;

template <typename T, typename S = T>
struct CESScanParams {
  const S* x = nullptr;           // [B, L, H]
  const uint8_t* mask = nullptr;  // [B, L] or null
  const T* mu = nullptr;          // [C][2]
  const T* c = nullptr;           // [C][2]
  S* y = nullptr;                 // [B, L, H] output (forward)
  const S* grad_y = nullptr;      // [B, L, H] (backward)
  S* grad_x = nullptr;            // [B, L, H]
  double* grad_mu = nullptr;      // [B][C][2]
  double* grad_c = nullptr;       // [B][C][2]
  int64_t B = 0, L = 0, H = 0;
  bool bidirectional = false;
};

/// Number of (sequence, channel run) work items.
int64_t ces_work_items(int64_t B, int64_t H);

/// Elements of T one thread's `acc` buffer needs (0: none, pass null).
template <typename T, typename S>
int64_t ces_scratch_elems(const CESScanParams<T, S>& p) {
  return p.bidirectional && !std::is_same_v<T, S> ? p.L * kCESChannels : 0;
}

/// Runs work items [begin, end) of the forward pass (writes y); `acc` holds
/// ces_scratch_elems(p) elements.
template <typename T, typename S>
void ces_scan_forward(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc);

/// Runs work items [begin, end) of the backward pass (writes grad_x, grad_mu, grad_c).
template <typename T, typename S>
void ces_scan_backward(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc);

}  // namespace seqmix::ops::cpu
