#pragma once
// The causal mean's CPU kernel (plain C++, no LibTorch), built once per instruction set
// (cpu/causal_mean_kernel_impl.h) and chosen at run time.
#include <cstdint>

namespace seqmix::mixers::mean::cpu {

template <typename T>
struct CausalMeanParams {
  int64_t B = 0, L = 0, D = 0, window = 1;
  const T* valid = nullptr;  // [B, L]: 1 valid, 0 padded; nullptr: all valid
  const T* inv_count = nullptr;  // [B, L]: 1 / |S(b, t)| where row t has an output, else 0
};

// Rows [begin, end) of out (row = b * L + t): out[row] = inv_count[row] * sum of x over S.
template <typename T>
void causal_mean_forward(const CausalMeanParams<T>& p, const T* x, T* out, int64_t begin,
                         int64_t end);
// Rows [begin, end) of grad_x (row = b * L + s): valid[s] * sum over t in [s, s + window)
// of inv_count[t] grad[t].
template <typename T>
void causal_mean_backward(const CausalMeanParams<T>& p, const T* grad, T* grad_x,
                          int64_t begin, int64_t end);

}  // namespace seqmix::mixers::mean::cpu
