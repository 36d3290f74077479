// Run-time dispatch of the fused AIB scan kernels to the widest instruction set the CPU has.
#include "aib_scan_kernel.h"

#include <algorithm>
#include <atomic>

#include "seqmix/util/cpu.h"

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

namespace {
std::atomic<bool> g_force_exact{false};
std::atomic<int64_t> g_fallbacks{0};
}  // namespace

void aib_force_exact_path(bool exact) { g_force_exact.store(exact); }
int64_t aib_fast_path_fallbacks() { return g_fallbacks.load(); }
void aib_count_fallback() { g_fallbacks.fetch_add(1, std::memory_order_relaxed); }

bool aib_exact_path_forced() { return g_force_exact.load(std::memory_order_relaxed); }

int64_t aib_work_items(int64_t B, int64_t D, bool bidirectional, int64_t lanes) {
  const int64_t halves = bidirectional ? 2 : 1, hd = D / halves;
  const int64_t span = lanes * aib_group_blocks();
  return B * halves * ((hd + span - 1) / span);
}

int64_t aib_scratch_bytes(int64_t L, int64_t K, int64_t lanes, int64_t elem_size, bool backward) {
  const int64_t staging =
      ((L + 63) / 64) * 64 + (3 * L * lanes + aib_group_blocks() * std::max<int64_t>(K, 1) * lanes) * elem_size;
  return aib_group_blocks() * aib_block_scratch_bytes(L, K, lanes, elem_size, backward) + staging;
}

int64_t aib_block_scratch_bytes(int64_t L, int64_t K, int64_t lanes, int64_t elem_size,
                                bool backward) {
  // Exponent path: three [L][lanes] arrays (h, u, exponent) per block plus two halo regions
  // (forward), or K + 1 level snapshots and one block of adjoints (backward). The fast path
  // reuses the same buffer with its own layout; whichever is larger sets the size.
  const int64_t exact = !backward ? (L + 2 * aib_halo_positions()) * 3 : (K + 2) * 3 * L;
  return std::max(exact, aib_fast_layout(L, K, backward).total) * lanes * elem_size;
}

template <typename T>
void aib_scan_forward(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  if (util::cpu_runs_avx512_kernels())
    avx512::forward_items<T>(p, begin, end, scratch);
  else
    base::forward_items<T>(p, begin, end, scratch);
}

template <typename T>
void aib_scan_backward(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  if (util::cpu_runs_avx512_kernels())
    avx512::backward_items<T>(p, begin, end, scratch);
  else
    base::backward_items<T>(p, begin, end, scratch);
}

template void aib_scan_forward<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void aib_scan_forward<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);
template void aib_scan_backward<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void aib_scan_backward<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);

}  // namespace seqmix::ops::cpu
