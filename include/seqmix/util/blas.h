#pragma once
/// @file blas.h
/// Which OpenBLAS kernels run LibTorch's matrix products (reported by `seqmix info` and
/// `seqmix bench`, since they set the speed of every projection and attention product).
///
/// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels when it is loaded: from the CPU, or
/// from the environment variable OPENBLAS_CORETYPE when that is set. Forcing an older family
/// costs real time: on a Zen 5 host (AVX-512, detected as "Cooperlake" by Debian 12's 0.3.21)
/// OPENBLAS_CORETYPE=Haswell made an AIB layer's forward+backward 1.5x and a softmax attention
/// layer's 1.35x slower (docs/RESULTS.md). A CPU it does not know gets the generic "Prescott"
/// (SSE3) kernels: on an Emerald Rapids host (cpuid family 6, model 207) that made a
/// Transformer ListOps run 1.45x slower; `reexec_with_fitting_openblas_core` fixes that
/// for the CLI.
#include <string>

namespace seqmix::util {

/// The OpenBLAS kernel family in use ("Haswell", "SkylakeX", "Cooperlake", ...; from
/// openblas_get_corename, looked up at run time), or "" when the BLAS loaded with LibTorch is
/// not OpenBLAS.
std::string openblas_core();

/// One line for logs: "OpenBLAS Cooperlake", "OpenBLAS Haswell (OPENBLAS_CORETYPE=Haswell)"
/// when the environment chose the kernels, "OpenBLAS Cooperlake (chosen by seqmix: ...)" when
/// `reexec_with_fitting_openblas_core` did, or "not OpenBLAS".
std::string blas_description();

/// The x86-64 extensions that decide which OpenBLAS kernel family can run here.
struct CpuFeatures {
  bool avx2_fma = false;     ///< AVX2 and FMA3: the Haswell kernels
  bool avx512 = false;       ///< AVX-512 F, BW, DQ and VL, enabled by the OS: SkylakeX
  bool avx512_bf16 = false;  ///< AVX-512 BF16 on top of that: Cooperlake
};

/// This CPU's features (GCC's `__builtin_cpu_supports`, which also checks that the OS saves
/// the AVX-512 state); all false on other architectures.
CpuFeatures cpu_features();

/// The kernel family to force with OPENBLAS_CORETYPE, or "" to keep what OpenBLAS chose.
/// Non-empty only when OpenBLAS fell back to its generic "Prescott" kernels (`loaded_core`)
/// on its own (`coretype_set` false: a user's OPENBLAS_CORETYPE, even "Prescott", is never
/// overridden) on a CPU that runs a faster family: "Cooperlake", "SkylakeX" or "Haswell", the
/// newest that `cpu` supports (OpenBLAS's own choices for such CPUs).
std::string openblas_core_override(const std::string& loaded_core, bool coretype_set,
                                   const CpuFeatures& cpu);

/// OpenBLAS picks its kernels once, when it is loaded with LibTorch, before `main` runs; so
/// when `openblas_core_override` names a family for this process, this sets
/// OPENBLAS_CORETYPE to it and re-executes the program (`/proc/self/exe` with `argv`, the
/// same environment otherwise). Returns only when nothing needs doing or the exec failed (the
/// program then goes on with the generic kernels). Call it first thing in `main`.
void reexec_with_fitting_openblas_core(char** argv);

}  // namespace seqmix::util
