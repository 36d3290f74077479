// Run-time dispatch of the CES kernels to the widest instruction set the CPU has.
#include "ces_scan_kernel.h"

#include "seqmix/util/cpu.h"

namespace seqmix::ops::cpu {

#define SEQMIX_DECLARE_ISA(ns)                                                             \
  namespace ns {                                                                           \
  template <typename T, typename S>                                                        \
  void ces_forward_items(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc);  \
  template <typename T, typename S>                                                        \
  void ces_backward_items(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc); \
  }
SEQMIX_DECLARE_ISA(avx512)
SEQMIX_DECLARE_ISA(base)
#undef SEQMIX_DECLARE_ISA

int64_t ces_work_items(int64_t B, int64_t H) {
  return B * ((H + kCESChannels - 1) / kCESChannels);
}

template <typename T, typename S>
void ces_scan_forward(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc) {
  if (util::cpu_runs_avx512_kernels())
    avx512::ces_forward_items<T, S>(p, begin, end, acc);
  else
    base::ces_forward_items<T, S>(p, begin, end, acc);
}

template <typename T, typename S>
void ces_scan_backward(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc) {
  if (util::cpu_runs_avx512_kernels())
    avx512::ces_backward_items<T, S>(p, begin, end, acc);
  else
    base::ces_backward_items<T, S>(p, begin, end, acc);
}

#define SEQMIX_INSTANTIATE(T, S)                                                            \
  template void ces_scan_forward<T, S>(const CESScanParams<T, S>&, int64_t, int64_t, T*);  \
  template void ces_scan_backward<T, S>(const CESScanParams<T, S>&, int64_t, int64_t, T*);
SEQMIX_INSTANTIATE(float, float)
SEQMIX_INSTANTIATE(double, double)
SEQMIX_INSTANTIATE(float, c10::BFloat16)
#undef SEQMIX_INSTANTIATE

}  // namespace seqmix::ops::cpu
