#pragma once
/// @file blas.h
/// Which OpenBLAS kernels run LibTorch's matrix products (reported by `seqmix info` and
/// `seqmix bench`, since they set the speed of every projection and attention product).
///
/// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels when it is loaded: from the CPU, or
/// from the environment variable OPENBLAS_CORETYPE when that is set. Forcing an older family
/// costs real time: on a Zen 5 host (AVX-512, detected as "Cooperlake" by Debian 12's 0.3.21)
/// OPENBLAS_CORETYPE=Haswell made an AIB layer's forward+backward 1.5x and a softmax attention
/// layer's 1.35x slower (docs/RESULTS.md).
#include <string>

namespace seqmix::util {

/// The OpenBLAS kernel family in use ("Haswell", "SkylakeX", "Cooperlake", ...; from
/// openblas_get_corename, looked up at run time), or "" when the BLAS loaded with LibTorch is
/// not OpenBLAS.
std::string openblas_core();

/// One line for logs: "OpenBLAS Cooperlake", "OpenBLAS Haswell (OPENBLAS_CORETYPE=Haswell)"
/// when the environment chose the kernels, or "not OpenBLAS".
std::string blas_description();

}  // namespace seqmix::util
