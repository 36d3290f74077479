// Run-time dispatch of the attention kernels to the widest instruction set the CPU has.
#include "attention_kernel.h"

#include "aib_scan_kernel.h"  // aib_kernel_uses_avx512: the same CPU check

namespace seqmix::ops::cpu {

#define SEQMIX_DECLARE_ISA(ns)                                                                 \
  namespace ns {                                                                               \
  template <typename T>                                                                        \
  void attention_forward_items(const AttentionParams<T>& p, int64_t begin, int64_t end);      \
  template <typename T>                                                                        \
  void attention_backward_items(const AttentionParams<T>& p, int64_t begin, int64_t end);     \
  }
SEQMIX_DECLARE_ISA(avx512)
SEQMIX_DECLARE_ISA(base)
#undef SEQMIX_DECLARE_ISA

template <typename T>
void attention_forward(const AttentionParams<T>& p, int64_t begin, int64_t end) {
  if (aib_kernel_uses_avx512())
    avx512::attention_forward_items<T>(p, begin, end);
  else
    base::attention_forward_items<T>(p, begin, end);
}

template <typename T>
void attention_backward(const AttentionParams<T>& p, int64_t begin, int64_t end) {
  if (aib_kernel_uses_avx512())
    avx512::attention_backward_items<T>(p, begin, end);
  else
    base::attention_backward_items<T>(p, begin, end);
}

template void attention_forward<float>(const AttentionParams<float>&, int64_t, int64_t);
template void attention_forward<double>(const AttentionParams<double>&, int64_t, int64_t);
template void attention_backward<float>(const AttentionParams<float>&, int64_t, int64_t);
template void attention_backward<double>(const AttentionParams<double>&, int64_t, int64_t);

}  // namespace seqmix::ops::cpu
