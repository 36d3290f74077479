// Run-time dispatch of the CES kernels to the widest instruction set the CPU has.
#include "ces_scan_kernel.h"

#include "seqmix/util/cpu.h"

namespace seqmix::ops::cpu {

#define SEQMIX_DECLARE_ISA(ns)                                                              \
  namespace ns {                                                                            \
  template <typename T>                                                                     \
  void ces_forward_items(const CESScanParams<T>& p, int64_t begin, int64_t end);           \
  template <typename T>                                                                     \
  void ces_backward_items(const CESScanParams<T>& p, int64_t begin, int64_t end);          \
  }
SEQMIX_DECLARE_ISA(avx512)
SEQMIX_DECLARE_ISA(base)
#undef SEQMIX_DECLARE_ISA

int64_t ces_work_items(int64_t B, int64_t H) {
  return B * ((H + kCESChannels - 1) / kCESChannels);
}

template <typename T>
void ces_scan_forward(const CESScanParams<T>& p, int64_t begin, int64_t end) {
  if (util::cpu_runs_avx512_kernels())
    avx512::ces_forward_items<T>(p, begin, end);
  else
    base::ces_forward_items<T>(p, begin, end);
}

template <typename T>
void ces_scan_backward(const CESScanParams<T>& p, int64_t begin, int64_t end) {
  if (util::cpu_runs_avx512_kernels())
    avx512::ces_backward_items<T>(p, begin, end);
  else
    base::ces_backward_items<T>(p, begin, end);
}

template void ces_scan_forward<float>(const CESScanParams<float>&, int64_t, int64_t);
template void ces_scan_forward<double>(const CESScanParams<double>&, int64_t, int64_t);
template void ces_scan_backward<float>(const CESScanParams<float>&, int64_t, int64_t);
template void ces_scan_backward<double>(const CESScanParams<double>&, int64_t, int64_t);

}  // namespace seqmix::ops::cpu
