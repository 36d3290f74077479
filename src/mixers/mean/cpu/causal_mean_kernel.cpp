// Run-time choice of the causal mean's build: AVX-512 where the CPU runs it, else the
// baseline x86-64 one.
#include "causal_mean_kernel.h"

#include "seqmix/util/cpu.h"

namespace seqmix::mixers::mean::cpu {

#define SEQMIX_DECLARE_ISA(ns)                                                                \
  namespace ns {                                                                              \
  template <typename T>                                                                       \
  void forward_rows(const CausalMeanParams<T>& p, const T* x, T* out, int64_t b, int64_t e);  \
  template <typename T>                                                                       \
  void backward_rows(const CausalMeanParams<T>& p, const T* g, T* gx, int64_t b, int64_t e);  \
  }
SEQMIX_DECLARE_ISA(avx512)
SEQMIX_DECLARE_ISA(base)
#undef SEQMIX_DECLARE_ISA

template <typename T>
void causal_mean_forward(const CausalMeanParams<T>& p, const T* x, T* out, int64_t begin,
                         int64_t end) {
  if (util::cpu_runs_avx512_kernels())
    avx512::forward_rows<T>(p, x, out, begin, end);
  else
    base::forward_rows<T>(p, x, out, begin, end);
}

template <typename T>
void causal_mean_backward(const CausalMeanParams<T>& p, const T* grad, T* grad_x,
                          int64_t begin, int64_t end) {
  if (util::cpu_runs_avx512_kernels())
    avx512::backward_rows<T>(p, grad, grad_x, begin, end);
  else
    base::backward_rows<T>(p, grad, grad_x, begin, end);
}

template void causal_mean_forward<float>(const CausalMeanParams<float>&, const float*, float*,
                                         int64_t, int64_t);
template void causal_mean_forward<double>(const CausalMeanParams<double>&, const double*,
                                          double*, int64_t, int64_t);
template void causal_mean_backward<float>(const CausalMeanParams<float>&, const float*, float*,
                                          int64_t, int64_t);
template void causal_mean_backward<double>(const CausalMeanParams<double>&, const double*,
                                           double*, int64_t, int64_t);

}  // namespace seqmix::mixers::mean::cpu
