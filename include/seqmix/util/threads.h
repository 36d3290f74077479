#pragma once
/// @file threads.h
/// Thread setup shared by every command and by code that trains or evaluates in-process:
/// the limit on requested thread counts and LibTorch's intra-op pool (which MKL's GEMMs share).
///
/// A command that will run many tiny parallel regions on more than one thread (token-by-token
/// generation) should also call reexec_with_passive_omp_wait (util/blas.h, included here)
/// before it loads or prints anything: libgomp reads its wait policy only when it is loaded.
#include <cstdint>
#include <string>

#include "seqmix/util/blas.h"

namespace seqmix::util {

/// The most threads a command may ask for: four per hardware thread (more only thrash).
int64_t max_threads();

/// Checks a thread count a user asked for: 0 (all hardware threads) up to max_threads().
/// @throws std::invalid_argument naming `what` (a flag or key) and the machine's count.
void check_threads(int64_t threads, const std::string& what);

/// Sets LibTorch's intra-op threads (and with them MKL's): `threads` if > 0, else the
/// hardware's thread count. Returns the thread count in effect.
/// @throws std::invalid_argument as check_threads(threads, "train.threads").
int64_t configure_threads(int64_t threads);

}  // namespace seqmix::util
