#pragma once
/// @file memory.h
/// Peak tensor-memory accounting for benchmarks: a CPU allocator that wraps LibTorch's default
/// one and counts live bytes. Once installed, every CPU tensor allocation (including kernel
/// scratch made with at::empty) is counted; memory allocated inside BLAS or with new is not.
#include <cstdint>

namespace seqmix::util {

/// Installs the counting allocator as LibTorch's CPU allocator (idempotent). Tensors that
/// already exist keep their own deleters and are not counted.
void install_memory_counter();
/// Bytes currently held by tensors allocated since install_memory_counter().
int64_t live_tensor_bytes();
/// Highest live_tensor_bytes() since the last reset_peak_tensor_bytes().
int64_t peak_tensor_bytes();
/// Starts a new peak window at the current live size.
void reset_peak_tensor_bytes();

/// Process-wide malloc policies for executables (a library should not change its host's
/// allocator; call once, before large allocations). Both keep freed heap memory for reuse
/// (no trimming), so a step's outputs do not pay the kernel's page-zeroing faults again each
/// time: at B=4, L=4096, D=512 those faults cost as much as the AIB scan itself
/// (docs/RESULTS.md). They differ in what happens to large blocks:
enum class HeapPolicy {
  /// Every request, however large, from the heap, kept after free: what PyTorch's caching
  /// allocators give on GPUs. For programs whose tensor shapes repeat exactly (`seqmix bench`);
  /// with shapes that vary from step to step (padded batches of varying length) the heap
  /// fragments and grows without bound (measured: 19.7 GB and an OOM kill after 30 ListOps
  /// steps of a model with softmax attention).
  kCaching,
  /// Requests of 32 MiB and more (glibc's largest mmap threshold) get their own mapping,
  /// returned to the system on free; smaller ones as kCaching. Resident memory stays bounded
  /// whatever the shapes (4.9 GB in the same ListOps run), at a small cost for fixed shapes
  /// (LM training steps 3% slower than kCaching, measured). Training, evaluation, generation.
  kBounded,
};
void set_heap_policy(HeapPolicy policy);

}  // namespace seqmix::util
