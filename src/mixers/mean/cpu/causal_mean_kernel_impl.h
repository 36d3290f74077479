// The causal mean's loops, compiled once per instruction set: the including file (generated
// by seqmix_isa_kernels) defines SEQMIX_ISA. Each output row sums at most `window` input
// rows; the loop over D is contiguous and left to the compiler's vectoriser.
#include <algorithm>
#include <cstdint>

#include "causal_mean_kernel.h"

#ifndef SEQMIX_ISA
#error "define SEQMIX_ISA before including causal_mean_kernel_impl.h"
#endif

namespace seqmix::mixers::mean::cpu::SEQMIX_ISA {

template <typename T>
void forward_rows(const CausalMeanParams<T>& p, const T* x, T* out, int64_t begin,
                  int64_t end) {
  const int64_t L = p.L, D = p.D;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / L, t = row % L;
    T* y = out + row * D;
    std::fill(y, y + D, T(0));
    const T scale = p.inv_count[row];
    if (scale == T(0)) continue;
    for (int64_t s = std::max<int64_t>(0, t - p.window + 1); s <= t; ++s) {
      if (p.valid && p.valid[b * L + s] == T(0)) continue;
      const T* xs = x + (b * L + s) * D;
      for (int64_t d = 0; d < D; ++d) y[d] += xs[d];
    }
    for (int64_t d = 0; d < D; ++d) y[d] *= scale;
  }
}

template <typename T>
void backward_rows(const CausalMeanParams<T>& p, const T* grad, T* grad_x, int64_t begin,
                   int64_t end) {
  const int64_t L = p.L, D = p.D;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / L, s = row % L;
    T* gx = grad_x + row * D;
    std::fill(gx, gx + D, T(0));
    if (p.valid && p.valid[row] == T(0)) continue;
    for (int64_t t = s; t < std::min(L, s + p.window); ++t) {
      const T scale = p.inv_count[b * L + t];
      if (scale == T(0)) continue;
      const T* g = grad + (b * L + t) * D;
      for (int64_t d = 0; d < D; ++d) gx[d] += scale * g[d];
    }
  }
}

template void forward_rows<float>(const CausalMeanParams<float>&, const float*, float*, int64_t,
                                  int64_t);
template void forward_rows<double>(const CausalMeanParams<double>&, const double*, double*,
                                   int64_t, int64_t);
template void backward_rows<float>(const CausalMeanParams<float>&, const float*, float*,
                                   int64_t, int64_t);
template void backward_rows<double>(const CausalMeanParams<double>&, const double*, double*,
                                    int64_t, int64_t);

}  // namespace seqmix::mixers::mean::cpu::SEQMIX_ISA
