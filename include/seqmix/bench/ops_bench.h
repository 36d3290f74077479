#pragma once
/// @file ops_bench.h
/// `seqmix bench ops`: speed and memory of the ops against their references and of AIB
/// attention against softmax self-attention as the sequence grows (measured numbers:
/// docs/BENCHMARKS.md, "AIB attention: fused kernel vs reference vs softmax attention").
///
/// For each L: forward and forward+backward wall time (median of `reps` runs after one
/// warm-up) and the peak tensor memory of forward+backward above what was live before
/// (util/memory.h). Two kinds of rows:
/// * op rows, "<op>_kernel" and "<op>_reference" for every op of the op-case registry
///   (ops/op_cases.h): the op's `benchmarked` case moved to [B, L, D] (OpCase::at_shape), run
///   on its float32 inputs, every input and parameter gradient computed:
///     aib_scan_kernel / _reference       causal, prefix_exp weights (Weird-Net's decoder);
///     ces_scan_kernel / _reference       causal, coefficients from the raw parameters inside
///                                        the timed region (the FFT formulation as reference);
///     attention_kernel / _reference      causal, head width 64 (H = D / 64);
///     extractor_conv_kernel / _reference the FFT convolution / per-lag sum, l = L;
/// * layer rows:
///     aib_layer        nn::AIBAttention (projections included, fused scan), causal;
///     attention_layer  nn::SelfAttention, causal, n_heads heads: the faster of the fused
///                      kernel, matmul + softmax and at::_scaled_dot_product_attention;
///     extractor_fast   nn::Extractor (extractor eqs. 18-20, l = the longest L) on the FFT path;
///     extractor_reference  the same layer on the literal per-lag sum.
///     prefix_sum_a / prefix_sum_b  aib-net Fig. 3: O = H / U with E = exp(A), H and U the
///                      plain prefix sums of E * V and E (eqs. 13-17), computed by
///                      Algorithm A (eqs. 18-23, L - 1 sequential steps: prefix_sum_sequential)
///                      or Algorithm B (eqs. 24-27, ceil(log2 L) shifted adds:
///                      prefix_sum_logdepth), in ATen ops with autograd as the paper's
///                      PyTorch code would; speed and memory only.
/// plus a STREAM-triad bandwidth (a = b + s c over 3 x 128 MiB float arrays, best of 5) and
/// the AIB kernel's achieved forward bandwidth on its minimal traffic (read A and V, write O).
/// A case whose estimated memory exceeds 80% of MemAvailable is skipped with a line saying so.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace seqmix::bench {

struct OpsBenchOptions {
  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192, 16384};
  int64_t batch = 4;
  int64_t d_model = 512;
  int64_t n_heads = 8;
  int64_t reps = 5;
  /// "fp32" or "bf16": the op rows take bfloat16 activations (float32 parameters), the layer
  /// rows run under bfloat16 autocast (nn/precision.h).
  std::string precision = "fp32";
  std::vector<std::string> ops = {"aib_scan_kernel", "aib_scan_reference", "aib_layer",
                                  "attention_layer"};

  /// Defaults of `seqmix bench extractor`: the Extractor paper's shape (Table 1: l = t = 128,
  /// D = 128, batch 64) with both Extractor paths next to self-attention.
  static OpsBenchOptions extractor_defaults() {
    OpsBenchOptions o;
    o.lengths = {128};
    o.batch = 64;
    o.d_model = 128;
    o.ops = {"extractor_fast", "extractor_reference", "attention_layer"};
    return o;
  }

  /// Defaults of `seqmix bench ces`: the CES kernel against the FFT reference at the AIB
  /// shapes (B = 4, D = H = 512, L = 1K .. 16K).
  static OpsBenchOptions ces_defaults() {
    OpsBenchOptions o;
    o.ops = {"ces_scan_kernel", "ces_scan_reference"};
    return o;
  }

  /// Defaults of `seqmix bench prefix`: aib-net Fig. 3, Algorithm A vs B.
  static OpsBenchOptions prefix_defaults() {
    OpsBenchOptions o;
    o.ops = {"prefix_sum_a", "prefix_sum_b"};
    return o;
  }
};

/// Every name `ops` accepts (op rows, then layer rows), for help texts.
std::vector<std::string> ops_bench_names();

/// Runs the benchmark; `emit` receives one JSON object per measurement as soon as it is
/// made (rows with "op" (the name as ops_bench_names() spells it), "L", "B", "D", "fwd_ms",
/// "fwd_bwd_ms", "peak_mib" [, "fwd_gbps"], skipped cases with "skipped", and one
/// {"op": "stream_triad", "gbps"}).
/// @throws std::invalid_argument for an unknown op name (listing the names) or a
///         non-positive size.
void run_ops_bench(const OpsBenchOptions& options,
                   const std::function<void(const nlohmann::json&)>& emit);

/// Inclusive prefix sum of x [B, L, D] along L by aib-net's Algorithm A: h_1 = x_1,
/// h_j = h_{j-1} + x_j, one ATen op per position (L - 1 adds, then a stack). Differentiable.
/// @throws std::invalid_argument unless x is 3-D.
at::Tensor prefix_sum_sequential(const at::Tensor& x);

/// The same by Algorithm B: for s = 1, 2, 4, ... < L, h[s:] += h[:-s] (out of place, so
/// autograd can differentiate it): ceil(log2 L) steps. @throws std::invalid_argument unless
/// x is 3-D.
at::Tensor prefix_sum_logdepth(const at::Tensor& x);

/// Shared by the benchmarks: the clock, milliseconds since t0, the median (of a copy; the
/// mean of the two middle values for an even count; std::invalid_argument if empty) and
/// /proc/meminfo's MemAvailable in bytes (8 GiB if unreadable).
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0);
double median(std::vector<double> values);
int64_t mem_available_bytes();

/// STREAM triad bandwidth in GB/s (1e9 bytes/s, 12 bytes counted per float element).
double stream_triad_gbps(int64_t elements = int64_t{32} << 20, int reps = 5);

/// Formats the collected rows as the human-readable table with ratios.
std::string format_ops_table(const std::vector<nlohmann::json>& rows);

}  // namespace seqmix::bench
