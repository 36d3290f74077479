#pragma once
/// @file aib_scan.h
/// AIB attention (alias Weird attention) scan: the weighted prefix sum at the heart of
/// Moss (moss-aib-attention, Sec. III), AIB-Net and Weird-Net (weird-net, Sec. III.B,
/// eqs. 29-38, Algorithms 1 and 2).
///
/// Legend: B batch, L sequence length, D channels, K = ceil(log2 max_len) distance levels.
///
/// Given A, V [B, L, D] and the level parameters w [K, D]:
///   E = exp(A),  H = E * V,  U = E
///   for j = 0 .. ceil(log2 L) - 1:  H[2^j:] += H[:-2^j] * W_j,  U[2^j:] += U[:-2^j] * W_j
///   O = H / U
/// with W_j the weight of distance 2^j. Closed form (causal):
///   H_i = sum_{d=0..i} a_d E_{i-d} V_{i-d},  a_d = prod_{k in bits(d)} W_k,
/// so O_i is a softmax over the prefix with position-dependent prior a_{i-j} (eq. 29).
/// Bidirectional (encoder, Algorithm 2): channels [0, D/2) run the causal prefix form with
/// W[:, :D/2], channels [D/2, D) the mirrored suffix form with W[:, D/2:].
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "seqmix/ops/common.h"

namespace seqmix::ops {

/// How the per-level distance weights W [K, D] are derived from the parameter w [K, D].
enum class AIBWeights {
  prefix_exp,  ///< W = exp(cumsum(w, 0)) (weird-net eq. 34, eqs. 57-61; the default)
  exp,         ///< W = exp(w) (the ablation of weird-net Table IX)
  ones,        ///< W = 1: PS attention (weird-net Sec. III.A, eqs. 12-27); w is unused
};

/// Parses "prefix_exp" | "exp" | "ones". @throws std::invalid_argument naming the value.
AIBWeights parse_aib_weights(const std::string& name);
std::string to_string(AIBWeights w);

/// Number of distance levels needed for sequences up to `max_len`: ceil(log2 max_len), >= 1.
/// @throws c10::ValueError if max_len > 2^62.
int64_t aib_num_levels(int64_t max_len);

/// Per-level distance weights W [K, D] (W_j multiplies distance 2^j) from w [K, D].
/// For `ones` returns ones shaped like w.
at::Tensor aib_level_weights(const at::Tensor& w, AIBWeights kind);

/// Per-distance weights a_d = prod_{k in bits(d)} W_k for d = 0 .. n-1 (a_0 = 1).
/// @param level_weights W [K, D] with 2^K >= n.  @return [n, D], same dtype.
/// @throws c10::Error if K levels cannot represent distance n - 1.
at::Tensor aib_lag_weights(const at::Tensor& level_weights, int64_t n);

/// Reference AIB scan: the papers' Algorithms 1/2 in ATen ops (autograd through ATen), their
/// ceil(log2 L) shift-and-add levels carried as (maximum, H e^-max, U e^-max) per position
/// and channel, each level rescaling the two terms it adds to their larger maximum. Exact
/// (to rounding) for any finite A and w: a term underflows only where it is negligible beside
/// the one that set its position's maximum, and an output reads nothing after its position
/// (causal) even through rounding. (One maximum per sequence, the literal form, underflows
/// every earlier window once a later A is ~100 larger in float32, ~740 in float64.) O is
/// linear in V: a (batch, channel) whose |V| reaches 2^64 (float32) or 2^960 (float64) is
/// computed on V * 2^-64 and scaled back, so H never overflows where O is finite.
///
/// @param a     A = X W_A (+ b_A), [B, L, D], float32 or float64, or bfloat16 (mixed
///              precision, common.h).
/// @param v     V = X W_V (+ b_V), [B, L, D], same dtype as `a`.
/// @param w     level parameters [K, D] with 2^K >= L (unused when weights == ones, may then
///              be undefined).
/// @param mask  [B, L] bool, true = valid position, or undefined (all valid). Padded
///              positions contribute nothing; outputs there are 0, and an output with no
///              valid position in its window is 0 (never NaN).
/// @return O [B, L, D].
/// @throws c10::Error on a shape/dtype mismatch (message names the argument), on odd D in
///         the bidirectional form, or when K levels are too few for L.
at::Tensor aib_scan_reference(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                              const at::Tensor& mask, Direction direction, AIBWeights weights);

/// The closed form H_i = sum_d a_d E_{i-d} V_{i-d} evaluated directly in O(L^2 D): an
/// independent oracle for tests. Same contract as aib_scan_reference.
at::Tensor aib_scan_closed_form(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                                const at::Tensor& mask, Direction direction, AIBWeights weights);

/// The op `seqmix::aib_scan` of PyTorch's dispatcher (torch.ops.seqmix.aib_scan in Python),
/// schema
///   aib_scan(Tensor a, Tensor v, Tensor? w, Tensor? mask=None, str direction="causal",
///            str weights="prefix_exp") -> Tensor
/// implemented per dispatch key (src/mixers/aib/aib_scan_kernel.cpp): CPU, the fused kernel
/// (src/mixers/aib/cpu/aib_scan_kernel.h); Autograd, its hand-written backward, itself the op
/// seqmix::_aib_scan_backward; Meta, shapes and dtypes alone (fake tensors: torch.compile,
/// torch.export); AutocastCPU, autocast switched off inside the op (common.h's rule). Forward
/// and backward in float32 and float64 (and bfloat16 A, V), gradients for A, V and w.
///
/// Same contract as aib_scan_reference, and its numerical guarantee for |V| below 2^64
/// (float32, bfloat16) or 2^960 (float64): no overflow and no NaN wherever the exact result is
/// finite. (O is linear in V, but the kernels' sums hold up to 2^100 times |V| in float; V past
/// that bound, e.g. 3e38, can overflow H to inf; aib_scan_reference scales such V.) Method (details in src/mixers/aib/cpu/):
/// * Fast path, plain floating point: E = exp(A - c) with one scale c per tile of 128
///   positions and channel, the running maximum of A over the valid positions so far plus a
///   shift that keeps the largest possible sum inside a tile (prod max(1, W_j) over the
///   levels below the tile length) at 2^100 (float). c only grows along the scan, so carrying
///   an earlier tile's sums into a later one multiplies them by exp(c_earlier - c_later) <= 1,
///   folded into that level's weight. The levels of a tile's length or more combine whole
///   rows of tiles, and each row keeps one power-of-two exponent per level (integer
///   arithmetic), so learned distance weights of any size stay exact (weird-net's w ~ N(0, 1)
///   puts prod W_j past float's range in about 1 channel of 300 at K = 14). O = H / U is
///   unchanged by the scales. Every result is checked where it is final: each live U within
///   [2^-100, max] (float), O or the gradients finite.
/// * Exponent path, for any channel block whose check fails (and always exact): every running
///   sum is kept as mantissas times a shared power-of-two exponent per position and channel,
///   so exp(A) for |A| up to 2^19 (e.g. A ~ N(0, 30^2)) and products of distance weights far
///   beyond the float range (W up to 1e30 per level) are represented exactly up to rounding;
///   negligible terms flush to zero.
/// * Beyond: A with |A| >= 2^19 anywhere, or a NaN or infinite A (a diverged model, a crafted
///   input), is outside the exponents' range; such a call runs the log-depth scan in ATen
///   with a maximum per position instead (exact for any finite A; NaN in the windows that
///   hold a NaN), never a clamped answer. Deciding costs one read of A (aminmax).
/// A position with no valid input in its window outputs 0 with zero gradient.
/// Cost: forward O(B L D log L) arithmetic on one pass of memory traffic (read A, V; write
/// O); backward recomputes the forward levels per channel block, so saved memory is
/// O(B L D) (A, V), plus O(L log L) scratch per thread. Under create_graph=True (second
/// derivatives: gradient penalties, Hessian-vector products) backward differentiates
/// aib_scan_reference at the saved inputs instead, so its gradients carry a graph.
/// Non-contiguous inputs are copied to contiguous ones first.
at::Tensor aib_scan_kernel(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                           const at::Tensor& mask, Direction direction, AIBWeights weights);

/// The op the layers call: the fused kernel (Backend::kernel, the default: seqmix::aib_scan)
/// or the reference (seqmix::aib_scan_reference, CompositeImplicitAutograd), both through
/// the dispatcher.
/// `direction`: causal (decoder, Algorithm 1) or bidirectional (encoder, Algorithm 2).
/// Same contract as aib_scan_reference.
///
/// Example:
///   namespace so = seqmix::ops;
///   const int64_t B = 2, L = 100, D = 64;
///   at::Tensor a = torch::randn({B, L, D}, torch::requires_grad());
///   at::Tensor v = torch::randn({B, L, D});
///   at::Tensor w = torch::randn({so::aib_num_levels(L), D});
///   at::Tensor mask = torch::ones({B, L}, torch::kBool);  // true = a real token
///   at::Tensor o = so::aib_scan(a, v, w, mask, so::Direction::causal,
///                               so::AIBWeights::prefix_exp);  // [B, L, D]
///   o.sum().backward();                                       // gradients for a
at::Tensor aib_scan(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                    const at::Tensor& mask, Direction direction, AIBWeights weights,
                    Backend backend = Backend::kernel);

/// Number of times the fused kernels left their fast path since the process started, on all
/// devices: on the CPU, each channel block (16 float or 8 double channels of one sequence,
/// one pass) rerun on the exponent path, and each call sent whole to the ATen scan
/// (|A| >= 2^19 or a non-finite A); on CUDA, each channel group of one sequence rerun by the
/// exact kernel (src/mixers/aib/cuda/). Normal training never falls back: a fallback means
/// A spans about 70 nats or more inside 128 positions (256 on CUDA), one distance level's
/// weight is beyond about e^+-50 next to a much smaller row, |V| >= 2^64 (float32),
/// or NaN/infinity; it is exact but several times slower. The first fallback a process sees
/// raises a one-time warning (TORCH_WARN_ONCE; on CUDA when the count is next read or a later
/// call finds it already copied to the host). Reading the CUDA count synchronises the current
/// device. Also the op seqmix::aib_scan_fallbacks() -> int
/// (torch.ops.seqmix.aib_scan_fallbacks(), seqmix.ops.aib_scan_fallbacks()).
int64_t aib_scan_fallbacks();

}  // namespace seqmix::ops
