#pragma once
/// @file cpu.h
/// What this CPU can run, asked once per process: the instruction sets that choose between
/// the AVX-512 and the baseline builds of the kernels in src/mixers/<name>/cpu/. Plain C++ without
/// LibTorch, since the kernel sources that include it are built without the precompiled
/// LibTorch header.
///
/// Example:
///   if (seqmix::util::cpu_runs_avx512_kernels()) {
///     // the AVX-512 build of a kernel
///   }
///   const seqmix::util::CpuFeatures& f = seqmix::util::cpu_features();
///   std::printf("avx2+fma %d, avx-512 %d\n", f.avx2_fma, f.avx512);

namespace seqmix::util {

/// The x86-64 extensions seqmix looks at.
struct CpuFeatures {
  bool avx2_fma = false;     ///< AVX2 and FMA3
  bool avx512 = false;       ///< AVX-512 F, BW, DQ and VL, enabled by the OS
  bool avx512_bf16 = false;  ///< AVX-512 BF16 on top of that
};

/// This CPU's features (GCC's `__builtin_cpu_supports`, which also checks that the OS saves
/// the AVX-512 state); all false on other architectures and compilers. Detected on the first
/// call, thread-safely, and the same for the rest of the process.
const CpuFeatures& cpu_features();

/// Whether the AVX-512 builds of the kernels (aib_scan, ces_scan, attention; compiled with
/// -mavx512f -mavx512dq -mavx512vl -mavx512bw -mavx2 -mfma) can run here: cpu_features().avx512,
/// which implies AVX2 and FMA on every CPU that has it. Otherwise the dispatchers run the
/// baseline (x86-64) builds.
bool cpu_runs_avx512_kernels();

}  // namespace seqmix::util
