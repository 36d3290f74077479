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

}  // namespace seqmix::util
