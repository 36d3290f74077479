#pragma once
/// @file common.h
/// Vocabulary shared by every op: which implementation runs (Backend) and which positions a
/// sequence position may read (Direction). Declared once so that every op, layer option and
/// configuration key spells them the same way.
#include <string>

namespace seqmix::ops {

/// Mixed precision (train.precision = bf16, nn/precision.h), for every op: the activations
/// (inputs with a sequence axis) may be bfloat16 with float32 (or bfloat16) parameters. The
/// op then computes in float32 and returns bfloat16 outputs and activation gradients, each
/// rounded to nearest once (within half a bfloat16 ulp of the float32 computation), and
/// parameter gradients in the parameters' dtype. The AIB, CES and attention kernels read
/// bfloat16 directly (AIB and CES also write it), so no float32 copy of an activation is
/// made; the references and the Extractor's FFT path convert around ATen's float32 ops.
/// LibTorch's autocast is switched off inside each op.

/// Which implementation of an op runs.
///
/// Example:
///   seqmix::ops::Backend b = seqmix::ops::parse_backend("reference");  // from a config value
///   at::Tensor ext = seqmix::ops::extractor_conv(x, w, b);
///   std::string key = seqmix::ops::to_string(b);                        // "reference"
enum class Backend {
  kernel,     ///< the optimised CPU implementation (fused scan, recurrence, flash-style, FFT)
  reference,  ///< the paper's algorithm written literally in ATen ops: the test oracle
};

/// Which positions an output position depends on.
enum class Direction {
  causal,         ///< positions j <= i (decoder)
  bidirectional,  ///< every position (encoder)
};

/// Parses "kernel" | "reference".
/// @throws std::invalid_argument naming the value and the accepted choices.
Backend parse_backend(const std::string& name);
/// "kernel" | "reference".
std::string to_string(Backend backend);

/// Parses "causal" | "bidirectional". @throws std::invalid_argument naming the value.
Direction parse_direction(const std::string& name);
/// "causal" | "bidirectional".
std::string to_string(Direction direction);

/// Whether this libseqmix holds the CUDA kernels of aib_scan and ces_scan (built with
/// SEQMIX_CUDA=auto|on where nvcc and a CUDA PyTorch were found; cmake/SeqmixCuda.cmake).
/// Without them those ops have no CUDA implementation, and a model cannot run on a GPU.
bool cuda_kernels_built();

}  // namespace seqmix::ops
