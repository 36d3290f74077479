#pragma once
/// @file memory.h
/// Peak tensor-memory accounting for benchmarks: a CPU allocator that wraps LibTorch's default
/// one and counts live bytes. Once installed, every CPU tensor allocation (including kernel
/// scratch made with at::empty) is counted; memory allocated inside BLAS or with new is not.
#include <cstdint>
#include <string>

namespace seqmix::util {

/// The machine's physical memory, bytes (sysconf _SC_PHYS_PAGES x _SC_PAGESIZE); 0 if the
/// system does not say.
int64_t physical_memory_bytes();

/// Memory the system can give this process now without swapping, bytes: /proc/meminfo's
/// MemAvailable, or physical_memory_bytes() where the kernel does not say.
int64_t available_memory_bytes();

/// Checks before a large allocation that `bytes` fit in 90% of available_memory_bytes().
/// @throws std::runtime_error "<what> needs about <X> GiB of memory, more than the <Y> GiB
///         available (MemAvailable)<hint>".
void check_available_memory(double bytes, const std::string& what, const std::string& hint);

/// Installs the counting allocator as LibTorch's CPU allocator (idempotent), in front of the
/// one in place (the large-block pool, if set_heap_policy() ran first). Tensors that already
/// exist keep their own deleters and are not counted.
void install_memory_counter();
/// Bytes currently held by tensors allocated since install_memory_counter().
int64_t live_tensor_bytes();
/// Highest live_tensor_bytes() since the last reset_peak_tensor_bytes().
int64_t peak_tensor_bytes();
/// Starts a new peak window at the current live size.
void reset_peak_tensor_bytes();

/// Process-wide malloc policies for executables (a library should not change its host's
/// allocator; call once, before large allocations, and before install_memory_counter()).
/// Both keep freed heap memory for reuse (no trimming), so a step's outputs do not pay the
/// kernel's page-zeroing faults again each time: at B=4, L=4096, D=512 those faults cost as
/// much as the AIB scan itself (docs/BENCHMARKS.md). Requests of 32 MiB and more (glibc's
/// largest mmap threshold) get their own mapping; freed, they wait in the large-block pool
/// (configure_large_block_cache) for a request of about their size, and go back to the system
/// when the pool is full. Caching every block in the heap instead (what PyTorch's caching
/// allocators do on GPUs) fragments it without bound as shapes change: 19.7 GB and an OOM
/// kill after 30 ListOps steps of a model with softmax attention, and 17 GB of resident
/// memory for the 6.3 GB of tensors of one L = 4096 attention case of `seqmix bench`.
enum class HeapPolicy {
  /// The pool holds up to large_block_cache_limit_from_env(). Resident memory stays bounded
  /// whatever the shapes (4.9 GB in that ListOps run before the pool). Training, evaluation,
  /// generation.
  kBounded,
  /// For programs whose shapes repeat exactly within a stage (`seqmix bench`, case by case):
  /// the pool may hold all of physical memory (SEQMIX_LARGE_BLOCK_CACHE_MIB still overrides),
  /// so after its first repetition a stage takes every large block from the pool; call
  /// release_free_heap() between stages.
  kRepeating,
};
/// @throws std::invalid_argument if SEQMIX_LARGE_BLOCK_CACHE_MIB is set but not a whole
///         number of MiB.
void set_heap_policy(HeapPolicy policy);

/// Returns the heap's free memory to the system (glibc malloc_trim: the top of the heap and
/// every free page inside it) and every block in the large-block pool; the pool's limit stays.
/// Between the stages of a HeapPolicy::kRepeating program, so one stage's free blocks neither
/// hold memory the next one needs nor hide it from MemAvailable.
void release_free_heap();

/// The large-block pool's limit under HeapPolicy::kBounded, bytes: SEQMIX_LARGE_BLOCK_CACHE_MIB
/// (MiB; 0 turns the pool off) when set, else a quarter of physical memory, at most 2 GiB.
/// The pool trades memory for speed; processes sharing a machine may each hold this much in
/// idle blocks, so lower it when several runs share one.
/// @throws std::invalid_argument naming the variable if its value is not a whole number of
///         MiB in [0, 2^40] (empty, signed, with a suffix), or is more than this machine's
///         physical memory.
int64_t large_block_cache_limit_from_env();

/// Keeps freed CPU tensor blocks of at least `min_bytes` for reuse, up to `max_cached_bytes`
/// held at once (least recently freed blocks go back to the system first): the large-block
/// pool of PyTorch's CUDA caching allocator, for the mapped blocks of set_heap_policy().
/// Without it every training step maps, faults in (the kernel zeroes every page) and unmaps
/// its large activations and attention scores again; on a paravirtualised host that took
/// most of the time of a Transformer step (docs/BENCHMARKS.md). A request reuses the smallest
/// cached block that is at least as large and at most 1/8 larger, so resident memory is at
/// most the live tensors, plus that slack, plus `max_cached_bytes`. A block the pool takes
/// fresh from the system is advised (madvise MADV_HUGEPAGE) onto 2 MiB transparent huge pages
/// before its first touch: 512 times fewer page faults, which on a paravirtualised host made
/// Transformer training about 2x faster (docs/BENCHMARKS.md, "Huge pages for large blocks").
/// The first call installs the pool as LibTorch's CPU allocator (above the default, below the
/// counting allocator of install_memory_counter); later calls change the limits and release
/// what no longer fits. Thread-safe. Executables only (it changes the host's allocator).
/// @throws std::invalid_argument if min_bytes < 1 or max_cached_bytes < 0.
void configure_large_block_cache(int64_t min_bytes, int64_t max_cached_bytes);

/// Bytes of free blocks the pool holds now, and how many requests it served from them since
/// the program started (0 before configure_large_block_cache).
int64_t large_block_cache_bytes();
int64_t large_block_cache_hits();
/// The pool's current limit, bytes (0 before configure_large_block_cache).
int64_t large_block_cache_limit();

/// The kernel's transparent-huge-page mode ("always", "madvise", "never"), from
/// /sys/kernel/mm/transparent_hugepage/enabled; empty if the system has none.
std::string transparent_huge_pages_mode();

/// One line for `seqmix info`: the pool's limit, where the limit came from, and whether large
/// blocks get transparent huge pages.
std::string large_block_pool_description();

}  // namespace seqmix::util
