// Run-time dispatch of the fused AIB scan kernels to the widest instruction set the CPU has.
#include "aib_scan_kernel.h"

namespace seqmix::ops::cpu {

#define SEQMIX_DECLARE_ISA(ns)                                                         \
  namespace ns {                                                                       \
  template <typename T>                                                                \
  void forward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* s);  \
  template <typename T>                                                                \
  void backward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* s); \
  }
SEQMIX_DECLARE_ISA(avx512)
SEQMIX_DECLARE_ISA(base)
#undef SEQMIX_DECLARE_ISA

bool aib_kernel_uses_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return yes;
}

int64_t aib_work_items(int64_t B, int64_t D, bool bidirectional, int64_t lanes) {
  const int64_t halves = bidirectional ? 2 : 1, hd = D / halves;
  return B * halves * ((hd + lanes - 1) / lanes);
}

int64_t aib_scratch_bytes(int64_t L, int64_t K, int64_t lanes, int64_t elem_size, bool backward) {
  // Three [L][lanes] arrays (h, u, exponent) per block; backward keeps K + 1 level snapshots
  // and one block of adjoints.
  const int64_t blocks = backward ? K + 2 : 1;
  return blocks * 3 * L * lanes * elem_size;
}

template <typename T>
void aib_scan_forward(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  if (aib_kernel_uses_avx512())
    avx512::forward_items<T>(p, begin, end, scratch);
  else
    base::forward_items<T>(p, begin, end, scratch);
}

template <typename T>
void aib_scan_backward(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  if (aib_kernel_uses_avx512())
    avx512::backward_items<T>(p, begin, end, scratch);
  else
    base::backward_items<T>(p, begin, end, scratch);
}

template void aib_scan_forward<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void aib_scan_forward<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);
template void aib_scan_backward<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void aib_scan_backward<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);

}  // namespace seqmix::ops::cpu
