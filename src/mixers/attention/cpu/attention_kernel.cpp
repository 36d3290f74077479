// Run-time dispatch of the attention kernels to the widest instruction set the CPU has.
#include "attention_kernel.h"

#include <atomic>

#include "seqmix/util/cpu.h"

namespace seqmix::ops::cpu {

namespace {
std::atomic<bool> g_force_base{false};
std::atomic<bool> g_no_bf16_products{false};
// Tests force the baseline build to compare it with the AVX-512 one on the same machine.
bool use_avx512() {
  return util::cpu_runs_avx512_kernels() && !g_force_base.load(std::memory_order_relaxed);
}
// The AVX-512 BF16 build only differs for bfloat16 inputs; float32 inputs keep the AVX-512 one.
template <typename T>
bool use_avx512bf16(const AttentionParams<T>& p) {
  return (p.bf16.q || p.bf16.v) && use_avx512() && util::cpu_features().avx512_bf16 &&
         !g_no_bf16_products.load(std::memory_order_relaxed);
}
}  // namespace

void attention_force_base_isa(bool base) { g_force_base.store(base); }
void attention_force_float_products(bool on) { g_no_bf16_products.store(on); }

#define SEQMIX_DECLARE_ISA(ns)                                                                 \
  namespace ns {                                                                               \
  template <typename T>                                                                        \
  int64_t attention_scratch(const AttentionParams<T>& p, bool backward);                      \
  template <typename T>                                                                        \
  void attention_forward_items(const AttentionParams<T>& p, int64_t begin, int64_t end, T* w); \
  template <typename T>                                                                        \
  void attention_backward_items(const AttentionParams<T>& p, int64_t begin, int64_t end, T* w);\
  }
SEQMIX_DECLARE_ISA(avx512bf16)
SEQMIX_DECLARE_ISA(avx512)
SEQMIX_DECLARE_ISA(base)
#undef SEQMIX_DECLARE_ISA

// Every build lays the scratch out alike (64-byte vectors either way).
template <typename T>
int64_t attention_scratch_elems(const AttentionParams<T>& p, bool backward) {
  return base::attention_scratch<T>(p, backward);
}

template <typename T>
void attention_forward(const AttentionParams<T>& p, int64_t begin, int64_t end, T* scratch) {
  if (use_avx512bf16(p))
    avx512bf16::attention_forward_items<T>(p, begin, end, scratch);
  else if (use_avx512())
    avx512::attention_forward_items<T>(p, begin, end, scratch);
  else
    base::attention_forward_items<T>(p, begin, end, scratch);
}

template <typename T>
void attention_backward(const AttentionParams<T>& p, int64_t begin, int64_t end, T* scratch) {
  if (use_avx512bf16(p))
    avx512bf16::attention_backward_items<T>(p, begin, end, scratch);
  else if (use_avx512())
    avx512::attention_backward_items<T>(p, begin, end, scratch);
  else
    base::attention_backward_items<T>(p, begin, end, scratch);
}

template int64_t attention_scratch_elems<float>(const AttentionParams<float>&, bool);
template int64_t attention_scratch_elems<double>(const AttentionParams<double>&, bool);
template void attention_forward<float>(const AttentionParams<float>&, int64_t, int64_t, float*);
template void attention_forward<double>(const AttentionParams<double>&, int64_t, int64_t, double*);
template void attention_backward<float>(const AttentionParams<float>&, int64_t, int64_t, float*);
template void attention_backward<double>(const AttentionParams<double>&, int64_t, int64_t,
                                         double*);

}  // namespace seqmix::ops::cpu
