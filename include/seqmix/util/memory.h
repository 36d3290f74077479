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

/// Process-wide malloc policy for programs that allocate the same large tensors every step
/// (training, benchmarks): glibc serves every request from its heap instead of fresh mmap
/// regions and keeps freed memory for reuse, so a step's outputs do not pay the kernel's
/// page-zeroing faults again each time (measured in docs/RESULTS.md: at B=4, L=4096, D=512
/// those faults cost as much as the AIB scan itself). It plays the part of PyTorch's caching
/// allocators; resident memory stays at the high-water mark. For executables only: a library
/// should not change its host's allocator. Call once, before large allocations.
void retain_freed_memory();

}  // namespace seqmix::util
