// seqmix::aib_scan and seqmix::_aib_scan_backward under the CUDA dispatch key: fused kernels
// for the log-depth weighted prefix sum O = H / U of AIB (Weird) attention (weird-net eq. 5-9,
// Algorithm 1; the contract is include/seqmix/ops/aib_scan.h).
//
// Method. With x = (E V, E), E = exp(A) (0 at padded positions), the scan is
//   S x at i = sum_{d >= 0} a_d x_{i-d},   a_d = prod_{j: bit j of d} W_j,
// the product of the K levels L_j x = x + W_j shift_{2^j} x. The levels commute, so S splits
// at m into the levels with shifts below T = 2^m and those at or above it (m = min(K, 8) up
// to L = 2^16, up to 10 beyond, so R = ceil(L / T) <= 1024 rows):
//   1. tile pass: per tile of T positions, the low levels over the tile and the T positions
//      before it (a window of T - 1 back is all the low levels reach), in shared memory;
//      writes z = S_lo x (float32 for float32/bfloat16 A, float64 for float64 A) and the
//      tile's scale;
//   2. row factors: one small kernel turns the tile scales into each row's factors for every
//      high level (below);
//   3. column pass: viewing z as R rows of T, the high levels are the same scan down each
//      column (shift 2^(j-m) rows), in shared memory; writes O = H / U.
// Backward (g = dLoss/dO): the tile pass and the row factors again, then the column pass
// recomputes H and U, forms dH = g / U and dU = -g O / U and runs the transposed high levels
// on them (the suffix scan S_hi^T); the tile pass then runs the transposed low levels (with
// the T positions after the tile) and writes dV = E P_H and dA = E V P_H + E P_U. The
// gradient of log W_j is <S_{>j}^T y, W_j shift_{2^j} S_{<j} x>; each pass recomputes
// S_{<j} x from its loaded input for each of its levels, and each block writes one float64
// partial sum per channel and level into a compact buffer ([B, blocks along L, levels, D]),
// summed in a fixed order afterwards (deterministic).
//
// Scale, so that nothing overflows for any learned weights. Tile r computes with
// E = exp(A - c_r), c_r = ceil(max of the valid A in its 2T-position window + a shift that
// keeps the low levels' largest possible sum below 2^64) -- an integer, so that scale
// differences are exact. Between rows, the high levels combine whole rows: row r's mantissas
// carry exp(c_r) 2^(e_r) with an integer exponent e_r per level, and level i makes
// x'_r = fa x_r + fb x_{r - 2^i} with fa = 2^(e_r - e'_r), fb = wm 2^(e_{r - 2^i} + k - e'_r),
// where wm 2^k = exp(lw + c_{r - 2^i} - c_r) is split in float64 and e'_r is chosen from a
// running upper bound on the row's sums so that its mantissas stay below 2^64 (float32;
// 2^500 in float64). Every rescale is a power of two: products of distance weights far beyond
// the float range (weird-net's w ~ N(0, 1) puts prod W_j past 2^128 in about 1 channel of
// 300 at K = 14) stay exact, and one row of T positions holds values from 2^64 down to the
// smallest normal float. O = H / U: the scales cancel. (tests/python/test_cuda_scan_method.py
// runs this arithmetic step by step in float32 against a float64 log-space oracle.)
//
// Exactness. Every valid position is checked where its result is final: U >= 2^-100 (2^-900
// in float64), H, U and the gradients finite, |c_r| < 2^24. A channel group whose check fails
// (A spanning ~70 nats within 2T positions, one level's weight beyond about e^+-50 next to
// a much smaller row, |V| >= 2^64, non-finite inputs) is
// flagged on the device, and an exact kernel, always launched and idle unless a flag is set,
// recomputes that group with a maximum per position (the arithmetic of aib_scan_stable:
// exact for any finite A, NaN where the inputs hold NaN) and counts it (aib_scan_fallbacks).
// Nothing waits for the host, so the op can be captured in a CUDA graph. Sequences longer
// than 2^20 run aib_scan_stable in ATen (also counted).
//
// Memory traffic (float32, B L D elements per array): forward reads A, V and writes z (2),
// then reads z and writes O: 7 array passes against the 3 of the floor; backward 5 + 4 + 5.
// The row factors ([B, K - m, R, D], R = L / T: 1/T of an array) stay in L2.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraphsUtils.cuh>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "../aib_scan_internal.h"
#include "ops/dispatch.h"
#include "ops/low_precision.h"

namespace seqmix::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kSmallTileBits = 8;   // up to L = 2^16: T <= 256, R <= 256
constexpr int kLargeTileBits = 10;  // up to L = 2^20: T <= 1024, R <= 1024
constexpr int kMaxLevels = 20;      // L <= 2^20 on the fused path

// Groups of an exact kernel processed at once (each needs its own scratch).
constexpr int64_t kExactScratchBytes = int64_t{32} << 20;
constexpr int64_t kMaxExactSlots = 8;

// Device-wide count of channel groups recomputed by the exact kernels (aib_scan_fallbacks).
__device__ unsigned long long g_exact_groups = 0;

// The kernels' configuration: CG channels per block (consecutive channels make a 32-byte
// sector per position in float32; float64 and long sequences take fewer to fit the backward
// passes' buffers in shared memory), tiles of at most 2^TB positions, at most 2^RB rows.
template <typename acc_t, bool kLarge>
struct Cfg {
  static constexpr int CG = kLarge ? (sizeof(acc_t) == 8 ? 1 : 2) : (sizeof(acc_t) == 8 ? 4 : 8);
  static constexpr int TB = kLarge ? kLargeTileBits : kSmallTileBits;
  static constexpr int RB = kLarge ? kLargeTileBits : kSmallTileBits;
  static constexpr int kLanes = kThreads / CG;                  // tile pass: threads per channel
  static constexpr int kTilePer = (2 << TB) / kLanes;           // tile pass: positions per thread
  static constexpr int kColPer = ((1 << RB) * CG) / kThreads;   // column pass: rows per thread
};

template <typename acc_t>
__host__ __device__ __forceinline__ acc_t tiny();
template <>
__host__ __device__ __forceinline__ float tiny<float>() {
  return 0x1p-100f;
}
template <>
__host__ __device__ __forceinline__ double tiny<double>() {
  return 0x1p-900;
}

// Every running sum's mantissa is kept below 2^kRowBits: the tile scale's shift bounds the
// low levels' sums, the row exponents the high levels'. Below it, down to the smallest normal
// number, is the dynamic range one row of T positions can hold (float32: 190 bits).
template <typename acc_t>
constexpr int kRowBits = sizeof(acc_t) == 8 ? 500 : 64;

// Row factors are normal numbers: 2^-kMinFactorExp and up (wm >= 2^-0.5 takes the rest).
template <typename acc_t>
constexpr int kMinFactorExp = sizeof(acc_t) == 8 ? 1021 : 125;
template <typename acc_t>
constexpr int kNormalExp = sizeof(acc_t) == 8 ? 1022 : 126;  // smallest normal: 2^-this

// The tile scale's shift (nats) for a channel: the low levels' largest sum, 2T
// prod_{j < m} max(1, W_j), times E <= exp(-shift), stays below 2^kRowBits. Also returns
// log2 of that bound (beta0), where the row exponents start.
template <typename Args>
__device__ double tile_shift(const Args& s, int64_t c, int row_bits, double* beta0) {
  double pos = 0;
  for (int j = 0; j < s.m; ++j) pos += fmax(0.0, double(s.lw[j * s.D + c]));
  const double shift = fmax(0.0, pos + log(2.0 * s.T) - row_bits * 0.6931471805599453);
  if (beta0) *beta0 = log2(2.0 * s.T) + (pos - shift) * 1.4426950408889634;
  return shift;
}
// A tile scale beyond this (|A| ~ 2^24) leaves the fast path: exponent sums must not wrap.
constexpr double kMaxScale = 16777216.0;
// Tile r's backward brings in tile r + 1's adjoints times exp(c_r - c_{r+1}); beyond this
// gap the factor would overflow, and the group takes the exact path.
template <typename acc_t>
constexpr double kMaxGap = sizeof(acc_t) == 8 ? 700.0 : 80.0;

template <typename scalar_t, typename acc_t>
struct ScanArgs {
  const scalar_t* a;       // [B, L, D]
  const scalar_t* v;       // [B, L, D]
  const bool* mask;        // [B, L] or null
  const acc_t* lw;         // [>= K, D] log W
  const scalar_t* grad_o;  // [B, L, D] (backward)
  int64_t B, L, D;
  int K, m, T, R, nh, groups, col_blocks;
  bool bidirectional;
  acc_t *zh, *zu;    // [B, R T, D] S_lo x (forward), S_hi^T y (backward), logical positions
  acc_t* zc;         // [B, R, D] tile scales (-inf: no valid position in the window)
  acc_t* zl;         // [B, R, D] log2 of the tile's smallest E (-inf where one is padded)
  acc_t *fa, *fb;    // [B, nh, R, D] column factors
  scalar_t* o;       // [B, L, D] forward output
  scalar_t *grad_a, *grad_v;
  double* tile_part;  // [B, R, m, D] partial sums of dLoss/d log W_j, j < m
  double* col_part;   // [B, col_blocks, nh, D] the same for j >= m
  int* flags;         // [B, groups]: nonzero sends the group to the exact kernel
};

// The suffix half of the bidirectional form runs reversed: logical position p of channel c
// is physical position L - 1 - p, so every channel is a causal scan.
template <typename Args>
__device__ __forceinline__ int64_t physical(const Args& s, int64_t c, int64_t p) {
  return (s.bidirectional && c >= s.D / 2) ? s.L - 1 - p : p;
}

template <typename Args>
__device__ __forceinline__ bool valid_at(const Args& s, int64_t b, int64_t q) {
  return s.mask == nullptr || s.mask[b * s.L + q];
}

template <typename acc_t>
__device__ __forceinline__ acc_t neg_inf() {
  return -static_cast<acc_t>(INFINITY);
}

template <typename Args>
__device__ __forceinline__ void flag_group(const Args& s, int64_t b, int group) {
  s.flags[b * s.groups + group] = 1;  // benign race: every writer stores 1
}

// One level on n positions of each of the block's sequences, in place in shared memory
// (element i of sequence q at [i * nseq + q]), for both buffers:
// x'[i] = a x[i] + b x[i - s] (forward) or x'[i] = a x[i] + b x[i + s] (transposed), with
// (a, b) = factors(i, src). Each thread owns positions lane, lane + nlanes, ... of sequence
// `seq`; every thread reads, the block synchronises, then every thread writes, so all threads
// of the block must call it.
template <int kPer, typename acc_t, typename Factors>
__device__ void apply_level(acc_t* x1, acc_t* x2, int nseq, int seq, int lane, int nlanes,
                            int n, int s, bool transposed, Factors factors) {
  acc_t n1[kPer], n2[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = lane + k * nlanes;
    if (i < n) {
      const int src = transposed ? i + s : i - s;
      const bool in = src >= 0 && src < n;
      acc_t a, b;
      factors(i, src, in, a, b);
      n1[k] = a * x1[i * nseq + seq] + (in ? b * x1[src * nseq + seq] : acc_t(0));
      n2[k] = a * x2[i * nseq + seq] + (in ? b * x2[src * nseq + seq] : acc_t(0));
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = lane + k * nlanes;
    if (i < n) {
      x1[i * nseq + seq] = n1[k];
      x2[i * nseq + seq] = n2[k];
    }
  }
  __syncthreads();
}

// A low level: the thread's uniform weight w, x[i] += w x[i -+ s].
template <int kPer, typename acc_t>
__device__ void level(acc_t* x1, acc_t* x2, int nseq, int seq, int lane, int nlanes, int n,
                      int s, acc_t w, bool transposed) {
  apply_level<kPer>(x1, x2, nseq, seq, lane, nlanes, n, s, transposed,
                    [w](int, int, bool, acc_t& a, acc_t& b) {
                      a = 1;
                      b = w;
                    });
}

// A high level on the rows of the block's sequences with per-row factors (fa, fb at
// [r * CG + channel] of the level's shared-memory table): x'_r = fa_r x_r + fb_r x_{r - s}
// (forward) or its transpose x'_r = fa_r x_r + fb_{r + s} x_{r + s}.
template <int kPer, int CG, typename acc_t>
__device__ void row_level(acc_t* x1, acc_t* x2, int nseq, int seq, int lane, int nlanes, int n,
                          int s, const acc_t* fa, const acc_t* fb, bool transposed) {
  const int ch = seq % CG;
  apply_level<kPer>(x1, x2, nseq, seq, lane, nlanes, n, s, transposed,
                    [=](int i, int src, bool in, acc_t& a, acc_t& b) {
                      a = fa[i * CG + ch];
                      b = in ? fb[(transposed ? src : i) * CG + ch] : acc_t(0);
                    });
}

template <typename acc_t>
__device__ void copy_buffers(acc_t* dst1, acc_t* dst2, const acc_t* src1, const acc_t* src2,
                             int count) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    dst1[i] = src1[i];
    dst2[i] = src2[i];
  }
  __syncthreads();
}

// Sums `value` over the lanes of each sequence and over the block's sequences that share a
// channel (`group` of them, adjacent), and writes one float64 per channel to out[c_local].
// (Sequence q of the block is channel q % CG of column q / CG.)
template <int CG>
__device__ void block_channel_sum(double* red, double value, int nseq, int seq, int lane,
                                  int nlanes, int group, double* out, int channels) {
  red[lane * nseq + seq] = value;
  __syncthreads();
  if (threadIdx.x < channels) {
    double sum = 0;
    for (int l = 0; l < nlanes; ++l)
      for (int g = 0; g < group; ++g) sum += red[l * nseq + g * CG + threadIdx.x];
    out[threadIdx.x] = sum;
  }
  __syncthreads();
}

// A tile-pass thread's place: channel c (sequence seq of CG in its block) of tile r of batch b,
// positions lane, lane + kLanes, ... of the block's 2T-position buffers.
template <int CG>
struct TilePlace {
  int seq, lane, n;
  int64_t r, b, c;
  bool active;

  template <typename Args>
  __device__ explicit TilePlace(const Args& s)
      : seq(threadIdx.x % CG), lane(threadIdx.x / CG), n(2 * s.T), r(blockIdx.x),
        b(blockIdx.z), c(int64_t(blockIdx.y) * CG + threadIdx.x % CG), active(c < s.D) {}
};

// The low levels 0 .. last - 1 over the tile buffers in shared memory, in place.
template <typename C, typename scalar_t, typename acc_t>
__device__ void low_levels(const ScanArgs<scalar_t, acc_t>& s, const TilePlace<C::CG>& p,
                           acc_t* h, acc_t* u, int last) {
  for (int j = 0; j < last; ++j) {
    const acc_t w = p.active ? exp(s.lw[j * s.D + p.c]) : acc_t(0);
    level<C::kTilePer>(h, u, C::CG, p.seq, p.lane, C::kLanes, p.n, 1 << j, w, false);
  }
}

// The raw window [rT - T, rT + T) of the thread's channel into shared memory: A (-inf where
// padded or outside [0, L)) into ra, V (0 there) into rv; then a barrier.
template <typename C, typename scalar_t, typename acc_t>
__device__ void load_window(const ScanArgs<scalar_t, acc_t>& s, const TilePlace<C::CG>& p,
                            acc_t* ra, acc_t* rv) {
  const int64_t base = p.r * s.T - s.T;
  for (int i = p.lane; i < p.n; i += C::kLanes) {
    acc_t av = neg_inf<acc_t>(), vv = 0;
    const int64_t pos = base + i;
    if (p.active && pos >= 0 && pos < s.L) {
      const int64_t q = physical(s, p.c, pos);
      if (valid_at(s, p.b, q)) {
        const int64_t at = (p.b * s.L + q) * s.D + p.c;
        av = static_cast<acc_t>(s.a[at]);
        vv = static_cast<acc_t>(s.v[at]);
      }
    }
    ra[i * C::CG + p.seq] = av;
    rv[i * C::CG + p.seq] = vv;
  }
  __syncthreads();
}

// The tile's scale per channel from the raw A window: c = ceil(max A + shift), -inf when the
// window has no valid position; `red` holds 2 kThreads + 2 CG values. Also log2 of the
// smallest E of the tile's own positions (each sum of the tile holds its position's own E,
// so no value that counts is smaller), -inf where one of them is padded. A NaN is left out
// of both (fmax, fmin): it spoils the outputs that hold it, which the checks catch.
template <typename C, typename scalar_t, typename acc_t>
__device__ acc_t tile_scale(const ScanArgs<scalar_t, acc_t>& s, const TilePlace<C::CG>& p,
                            const acc_t* ra, acc_t* red, acc_t* lowest) {
  acc_t mx = neg_inf<acc_t>(), mn = static_cast<acc_t>(INFINITY);
  for (int i = p.lane; i < p.n; i += C::kLanes) {
    const acc_t x = ra[i * C::CG + p.seq];
    mx = fmax(mx, x);
    if (i >= s.T && p.r * s.T + (i - s.T) < s.L) mn = fmin(mn, x);
  }
  red[threadIdx.x] = mx;
  red[kThreads + threadIdx.x] = mn;
  __syncthreads();
  if (threadIdx.x < C::CG) {
    acc_t top = neg_inf<acc_t>(), bottom = static_cast<acc_t>(INFINITY);
    for (int l = 0; l < C::kLanes; ++l) {
      top = fmax(top, red[l * C::CG + threadIdx.x]);
      bottom = fmin(bottom, red[kThreads + l * C::CG + threadIdx.x]);
    }
    acc_t c = neg_inf<acc_t>();
    const int64_t ch = int64_t(blockIdx.y) * C::CG + threadIdx.x;
    if (top != neg_inf<acc_t>() && ch < s.D)
      c = static_cast<acc_t>(ceil(double(top) + tile_shift(s, ch, kRowBits<acc_t>, nullptr)));
    red[2 * kThreads + threadIdx.x] = c;
    red[2 * kThreads + C::CG + threadIdx.x] =
        (bottom == neg_inf<acc_t>() || c == neg_inf<acc_t>())
            ? neg_inf<acc_t>()
            : static_cast<acc_t>((double(bottom) - double(c)) * 1.4426950408889634);
  }
  __syncthreads();
  *lowest = red[2 * kThreads + C::CG + p.seq];
  return red[2 * kThreads + p.seq];
}

// x = (E V, E) with E = exp(A - c) in place over the raw window; 0 where padded or when the
// window is empty.
template <typename C, typename acc_t>
__device__ void window_x(const TilePlace<C::CG>& p, acc_t* h, acc_t* u, acc_t c) {
  for (int i = p.lane; i < p.n; i += C::kLanes) {
    const acc_t av = h[i * C::CG + p.seq];
    const acc_t e = (av == neg_inf<acc_t>() || c == neg_inf<acc_t>()) ? acc_t(0) : exp(av - c);
    h[i * C::CG + p.seq] = e * u[i * C::CG + p.seq];
    u[i * C::CG + p.seq] = e;
  }
  __syncthreads();
}

// ---- Pass 1, forward: z = S_lo x per tile, and the tile scales ----
// grid (R, groups, B); shared: h and u over the tile and the T positions before it.
template <typename C, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) tile_forward(ScanArgs<scalar_t, acc_t> s) {
  const TilePlace<C::CG> p(s);
  extern __shared__ unsigned char smem_raw[];
  acc_t* sh = reinterpret_cast<acc_t*>(smem_raw);
  acc_t* su = sh + p.n * C::CG;
  acc_t* red = su + p.n * C::CG;
  load_window<C>(s, p, sh, su);
  acc_t lowest = 0;
  const acc_t c = tile_scale<C>(s, p, sh, red, &lowest);
  window_x<C>(p, sh, su, c);
  low_levels<C>(s, p, sh, su, s.m);
  if (!p.active) return;
  if (p.lane == 0) {
    s.zc[(p.b * s.R + p.r) * s.D + p.c] = c;
    s.zl[(p.b * s.R + p.r) * s.D + p.c] = lowest;
    if (c != neg_inf<acc_t>() && !(fabs(double(c)) < kMaxScale)) flag_group(s, p.b, blockIdx.y);
  }
  const int64_t base = p.r * s.T - s.T;
  for (int i = s.T + p.lane; i < p.n; i += C::kLanes) {
    const int64_t at = (p.b * int64_t(s.R) * s.T + base + i) * s.D + p.c;
    s.zh[at] = sh[i * C::CG + p.seq];
    s.zu[at] = su[i * C::CG + p.seq];
  }
}

// ---- Row factors: fa, fb [B, nh, R, D] from the tile scales; one thread per (b, channel) ----
// Row r's values are mantissas x 2^e_r x exp(c_r). Each level keeps the integer e_r, or
// raises it when an upper bound on the row's sums (log2, in float64: a bound, not the
// content, so the choice is the same in every column) would pass 2^kRowBits. A row whose
// window had no valid position (c = -inf) holds zeros: it sets no bound (and its factors
// are 0), and 0 stands in for its scale.
template <int RB, int CG, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) row_factors(ScanArgs<scalar_t, acc_t> s) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.B * s.D) return;
  const int64_t b = idx / s.D, c = idx % s.D;
  constexpr double log2e = 1.4426950408889634;
  int e[1 << RB];
  double bound[1 << RB], lower[1 << RB];
  double beta0 = 0;
  tile_shift(s, c, kRowBits<acc_t>, &beta0);
  auto scale = [&](int r) { return double(s.zc[(b * s.R + r) * s.D + c]); };
  for (int r = 0; r < s.R; ++r) {
    e[r] = 0;
    bound[r] = scale(r) == -INFINITY ? -INFINITY : beta0;
    lower[r] = s.zl[(b * s.R + r) * s.D + c];
  }
  for (int i = 0; i < s.nh; ++i) {
    const int rs = 1 << i;
    const double lw = s.lw[(s.m + i) * s.D + c];
    const int64_t row0 = ((b * s.nh + i) * s.R) * s.D + c;
    for (int r = 0; r < min(rs, s.R); ++r) {
      s.fa[row0 + r * s.D] = 1;
      s.fb[row0 + r * s.D] = 0;
    }
    // Descending, so row r - rs is still at the previous level when it is read.
    for (int r = s.R - 1; r >= rs; --r) {
      const double cr = scale(r) == -INFINITY ? 0.0 : scale(r);
      const double cp = scale(r - rs) == -INFINITY ? 0.0 : scale(r - rs);
      // Scales are integers below 2^24 (else the group is flagged), so cp - cr is exact;
      // W exp(cp - cr) = wm 2^k carries row r - rs into row r's units.
      double t = (lw + (cp - cr)) * log2e;
      double wm = 1;
      int k = 0;
      if (t == t) {
        t = fmin(fmax(t, -67108864.0), 67108864.0);  // 2^26: exponent sums stay within int
        const double kd = rint(t);
        wm = exp2(t - kd);
        k = static_cast<int>(kd);
      } else {
        wm = t;  // NaN weight: NaN sums, caught by the checks
      }
      const double src = bound[r - rs] + k + log2(wm);
      const double src_low = lower[r - rs] + k + log2(wm);
      const double top = fmax(bound[r], src), low = fmin(bound[r], src);
      const double next = top == -INFINITY ? top : top + log2(1.0 + exp2(low - top));
      // The exponent moves only when the bound would pass 2^kRowBits (as on the CPU).
      const int en = next - e[r] > kRowBits<acc_t> ? static_cast<int>(ceil(next)) - kRowBits<acc_t>
                                                   : e[r];
      const int eb = e[r - rs] + k;
      // A factor below the normal range flushes a row: harmless if all it could carry is
      // below the smallest normal number (then under 2^-26 of any U that passes the final
      // check), or below 2^-24 of the least the other row holds at every column (known where
      // nothing is padded); else the group takes the exact kernel.
      if ((e[r] - en < -kMinFactorExp<acc_t> && bound[r] - en > -kNormalExp<acc_t> &&
           bound[r] > src_low - 24) ||
          (eb - en < -kMinFactorExp<acc_t> && src - en > -kNormalExp<acc_t> &&
           src > lower[r] - 24))
        flag_group(s, b, static_cast<int>(c / CG));
      const double fa = bound[r] == -INFINITY ? 0.0 : ldexp(1.0, max(e[r] - en, -1100));
      const double fb = bound[r - rs] == -INFINITY ? 0.0 : wm * ldexp(1.0, max(eb - en, -1100));
      s.fa[row0 + r * s.D] = static_cast<acc_t>(fa);
      s.fb[row0 + r * s.D] = static_cast<acc_t>(fb);
      e[r] = en;
      bound[r] = next;
      lower[r] = fmax(lower[r], src_low);
    }
  }
}

// The column pass's layout: a block takes CG channels of `cols` adjacent columns; each
// sequence (column, channel) has R rows, spread over `lanes` threads, C::kColPer rows each
// at most.
struct ColumnLayout {
  int cols, lanes;
};

template <typename C>
__host__ __device__ inline ColumnLayout column_layout(int R, int T) {
  int rows_p2 = 1;
  while (rows_p2 < R) rows_p2 <<= 1;
  // kThreads * kColPer elements per block, at most kThreads sequences, at most T columns.
  int cols = (kThreads * C::kColPer) / (rows_p2 * C::CG);
  cols = cols < 1 ? 1 : cols;
  cols = cols > kThreads / C::CG ? kThreads / C::CG : cols;
  cols = cols > T ? T : cols;
  return {cols, kThreads / (cols * C::CG)};
}

// A column-pass thread's place: sequence `seq` of its block (channel c of column t, batch b),
// rows lane, lane + lanes, ... (column_layout: every thread of the block has one).
struct ColumnPlace {
  int nseq, seq, lane, lanes, cols;
  int64_t b, c, t;
  bool active;
};

template <typename C, typename Args>
__device__ ColumnPlace column_place(const Args& s) {
  const ColumnLayout lay = column_layout<C>(s.R, s.T);
  ColumnPlace p;
  p.cols = lay.cols;
  p.lanes = lay.lanes;
  p.nseq = lay.cols * C::CG;
  p.seq = threadIdx.x % p.nseq;
  p.lane = threadIdx.x / p.nseq;
  p.b = blockIdx.z;
  p.c = int64_t(blockIdx.y) * C::CG + p.seq % C::CG;
  p.t = int64_t(blockIdx.x) * lay.cols + p.seq / C::CG;
  p.active = p.c < s.D && p.t < s.T;
  return p;
}

// The rows of the thread's column of (zh, zu) into shared memory (h, u), and the block's
// row factors of every high level ([nh][R][CG] each, 1 and 0 for missing channels) into
// (fa, fb); then a barrier.
template <typename C, typename scalar_t, typename acc_t>
__device__ void load_column(const ScanArgs<scalar_t, acc_t>& s, const ColumnPlace& p, acc_t* h,
                            acc_t* u, acc_t* fa, acc_t* fb) {
  const int64_t RT = int64_t(s.R) * s.T;
  for (int r = p.lane; r < s.R; r += p.lanes) {
    acc_t zh = 0, zu = 0;
    if (p.active) {
      const int64_t at = (p.b * RT + r * s.T + p.t) * s.D + p.c;
      zh = s.zh[at];
      zu = s.zu[at];
    }
    h[r * p.nseq + p.seq] = zh;
    u[r * p.nseq + p.seq] = zu;
  }
  const int count = s.nh * s.R * C::CG;
  for (int k = threadIdx.x; k < count; k += blockDim.x) {
    const int ch = k % C::CG, r = (k / C::CG) % s.R, i = k / (C::CG * s.R);
    const int64_t c = int64_t(blockIdx.y) * C::CG + ch;
    acc_t a = 1, bw = 0;
    if (c < s.D) {
      const int64_t at = ((p.b * s.nh + i) * s.R + r) * s.D + c;
      a = s.fa[at];
      bw = s.fb[at];
    }
    fa[k] = a;
    fb[k] = bw;
  }
  __syncthreads();
}

// The high levels 0 .. last - 1 (of nh) down the columns in shared memory, in place.
template <typename C, typename scalar_t, typename acc_t>
__device__ void high_levels(const ScanArgs<scalar_t, acc_t>& s, const ColumnPlace& p, acc_t* h,
                            acc_t* u, const acc_t* fa, const acc_t* fb, int last) {
  const int level_size = s.R * C::CG;
  for (int i = 0; i < last; ++i)
    row_level<C::kColPer, C::CG>(h, u, p.nseq, p.seq, p.lane, p.lanes, s.R, 1 << i,
                                 fa + i * level_size, fb + i * level_size, false);
}

// ---- Pass 2, forward: the high levels down each column, then O = H / U ----
// grid (col_blocks, groups, B).
template <typename C, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) column_forward(ScanArgs<scalar_t, acc_t> s) {
  const ColumnPlace p = column_place<C>(s);
  extern __shared__ unsigned char smem_raw[];
  const int count = s.R * p.nseq, fcount = s.nh * s.R * C::CG;
  acc_t* sh = reinterpret_cast<acc_t*>(smem_raw);
  acc_t *su = sh + count, *fa = su + count, *fb = fa + fcount;
  load_column<C>(s, p, sh, su, fa, fb);
  high_levels<C>(s, p, sh, su, fa, fb, s.nh);
  if (!p.active) return;
  bool bad = false;
  for (int r = p.lane; r < s.R; r += p.lanes) {
    const int64_t pos = int64_t(r) * s.T + p.t;
    if (pos >= s.L) break;
    const int64_t q = physical(s, p.c, pos);
    const acc_t h = sh[r * p.nseq + p.seq], u = su[r * p.nseq + p.seq];
    acc_t out = 0;
    if (valid_at(s, p.b, q)) {
      bad |= !(u >= tiny<acc_t>() && isfinite(h) && isfinite(u));
      out = h / u;
    }
    s.o[(p.b * s.L + q) * s.D + p.c] = static_cast<scalar_t>(out);
  }
  if (bad) flag_group(s, p.b, blockIdx.y);
}

// ---- Pass 2, backward: recompute H, U; y = (g / U, -g O / U); y <- S_hi^T y; the gradient
// of the high levels ----
template <typename C, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) column_backward(ScanArgs<scalar_t, acc_t> s) {
  const ColumnPlace p = column_place<C>(s);
  extern __shared__ unsigned char smem_raw[];
  const int count = s.R * p.nseq, fcount = s.nh * s.R * C::CG;
  acc_t* z0h = reinterpret_cast<acc_t*>(smem_raw);
  acc_t *z0u = z0h + count, *zwh = z0u + count, *zwu = zwh + count, *yh = zwu + count,
        *yu = yh + count, *fa = yu + count, *fb = fa + fcount;
  double* red = reinterpret_cast<double*>(fb + fcount);
  const int seq = p.seq, nseq = p.nseq;
  load_column<C>(s, p, z0h, z0u, fa, fb);
  copy_buffers(zwh, zwu, z0h, z0u, count);
  high_levels<C>(s, p, zwh, zwu, fa, fb, s.nh);
  bool bad = false;
  for (int r = p.lane; r < s.R; r += p.lanes) {
    const int64_t pos = int64_t(r) * s.T + p.t;
    acc_t dh = 0, du = 0;
    if (p.active && pos < s.L) {
      const int64_t q = physical(s, p.c, pos);
      if (valid_at(s, p.b, q)) {
        const acc_t h = zwh[r * nseq + seq], u = zwu[r * nseq + seq];
        bad |= !(u >= tiny<acc_t>() && isfinite(h) && isfinite(u));
        dh = static_cast<acc_t>(s.grad_o[(p.b * s.L + q) * s.D + p.c]) / u;
        du = -dh * (h / u);
      }
    }
    yh[r * nseq + seq] = dh;
    yu[r * nseq + seq] = du;
  }
  __syncthreads();
  const int channels = static_cast<int>(
      s.D - int64_t(blockIdx.y) * C::CG < C::CG ? s.D - int64_t(blockIdx.y) * C::CG : C::CG);
  const int level_size = s.R * C::CG, ch = seq % C::CG;
  for (int i = s.nh - 1; i >= 0; --i) {
    const int shift = 1 << i;
    const acc_t *fai = fa + i * level_size, *fbi = fb + i * level_size;
    // S_{<i} z: the high levels below i, from the loaded z.
    copy_buffers(zwh, zwu, z0h, z0u, count);
    high_levels<C>(s, p, zwh, zwu, fa, fb, i);
    // d x'_r / d log W = fb_r x_{r - shift}.
    double part = 0;
    for (int r = p.lane; r < s.R; r += p.lanes)
      if (r >= shift)
        part += double(fbi[r * C::CG + ch]) *
                (double(yh[r * nseq + seq]) * zwh[(r - shift) * nseq + seq] +
                 double(yu[r * nseq + seq]) * zwu[(r - shift) * nseq + seq]);
    block_channel_sum<C::CG>(
        red, p.active ? part : 0.0, nseq, seq, p.lane, p.lanes, p.cols,
        s.col_part + ((p.b * s.col_blocks + blockIdx.x) * s.nh + i) * s.D + blockIdx.y * C::CG,
        channels);
    row_level<C::kColPer, C::CG>(yh, yu, nseq, seq, p.lane, p.lanes, s.R, shift, fai, fbi,
                                 true);
  }
  if (bad) flag_group(s, p.b, blockIdx.y);
  if (!p.active) return;
  const int64_t RT = int64_t(s.R) * s.T;
  for (int r = p.lane; r < s.R; r += p.lanes) {
    const int64_t at = (p.b * RT + r * s.T + p.t) * s.D + p.c;
    s.zh[at] = yh[r * nseq + seq];
    s.zu[at] = yu[r * nseq + seq];
  }
}

// ---- Pass 1, backward: P = S_lo^T (S_hi^T y), the input gradients, grad of the low levels ---
// x over [rT - T, rT + T) (buffer index i <-> position rT - T + i) at the tile's scale c_r;
// y over [rT, rT + 2T) (index i <-> position rT + i): this tile's adjoints, and the next
// tile's brought to this tile's scale by exp(c_r - c_{r+1}) (the next tile computed its sums
// from the same inputs with its own scale).
template <typename C, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) tile_backward(ScanArgs<scalar_t, acc_t> s) {
  const TilePlace<C::CG> p(s);
  constexpr int CG = C::CG, kLanes = C::kLanes;
  const int seq = p.seq, lane = p.lane, n = p.n, count = n * CG;
  const int64_t r = p.r, b = p.b, c = p.c;
  const bool active = p.active;
  extern __shared__ unsigned char smem_raw[];
  acc_t* x0h = reinterpret_cast<acc_t*>(smem_raw);
  acc_t *x0u = x0h + count, *xwh = x0u + count, *xwu = xwh + count, *yh = xwu + count,
        *yu = yh + count;
  double* red = reinterpret_cast<double*>(yu + count);
  const int64_t start = r * s.T, RT = int64_t(s.R) * s.T;
  load_window<C>(s, p, x0h, x0u);
  acc_t cr = 0, next = 0;
  bool bad = false;
  if (active) {
    cr = s.zc[(b * s.R + r) * s.D + c];
    if (r + 1 < s.R) {
      const acc_t cn = s.zc[(b * s.R + r + 1) * s.D + c];
      if (cn == neg_inf<acc_t>() || cr == neg_inf<acc_t>()) {
        next = 0;  // an empty window: its inputs (all padded) get no gradient
      } else {
        bad |= !(double(cr) - double(cn) < kMaxGap<acc_t>);
        next = bad ? acc_t(0) : exp(cr - cn);
      }
    }
  }
  window_x<C>(p, x0h, x0u, cr);
  for (int i = lane; i < n; i += kLanes) {
    acc_t dh = 0, du = 0;
    const int64_t pos = start + i;
    if (active && pos < RT) {
      const acc_t f = i < s.T ? acc_t(1) : next;
      dh = f * s.zh[(b * RT + pos) * s.D + c];
      du = f * s.zu[(b * RT + pos) * s.D + c];
    }
    yh[i * CG + seq] = dh;
    yu[i * CG + seq] = du;
  }
  __syncthreads();
  const int channels = static_cast<int>(
      s.D - int64_t(blockIdx.y) * CG < CG ? s.D - int64_t(blockIdx.y) * CG : CG);
  for (int j = s.m - 1; j >= 0; --j) {
    const int shift = 1 << j;
    const acc_t w = active ? exp(s.lw[j * s.D + c]) : acc_t(0);
    copy_buffers(xwh, xwu, x0h, x0u, count);
    low_levels<C>(s, p, xwh, xwu, j);
    double part = 0;
    for (int i = lane; i < s.T; i += kLanes) {  // the tile's positions
      const int xi = i + s.T - shift;
      part += double(w) * (double(yh[i * CG + seq]) * xwh[xi * CG + seq] +
                           double(yu[i * CG + seq]) * xwu[xi * CG + seq]);
    }
    block_channel_sum<CG>(red, active ? part : 0.0, CG, seq, lane, kLanes, 1,
                          s.tile_part + ((b * s.R + r) * s.m + j) * s.D + blockIdx.y * CG,
                          channels);
    level<C::kTilePer>(yh, yu, CG, seq, lane, kLanes, n, shift, w, true);
  }
  if (!active) {
    if (bad) flag_group(s, b, blockIdx.y);
    return;
  }
  for (int i = lane; i < s.T; i += kLanes) {
    const int64_t pos = start + i;
    if (pos >= s.L) break;
    const int64_t q = physical(s, c, pos);
    acc_t ga = 0, gv = 0;
    if (valid_at(s, b, q)) {
      const acc_t eh = x0h[(i + s.T) * CG + seq], eu = x0u[(i + s.T) * CG + seq];
      const acc_t ph = yh[i * CG + seq], pu = yu[i * CG + seq];
      ga = eh * ph + eu * pu;
      gv = eu * ph;
      bad |= !(isfinite(ga) && isfinite(gv));
    }
    const int64_t at = (b * s.L + q) * s.D + c;
    s.grad_a[at] = static_cast<scalar_t>(ga);
    s.grad_v[at] = static_cast<scalar_t>(gv);
  }
  if (bad) flag_group(s, b, blockIdx.y);
}

// ---- The exact kernels: a channel group of one sequence with a maximum per position ----
// Each running sum is (M, H, U) meaning (H e^M, U e^M); combining x_a with W x_b takes
// top = max(M_a, M_b + lw) and rescales both to it (aib_scan_stable's arithmetic, NaN
// propagating like at::maximum). The group's CG channels x L positions live in a scratch slot
// of global memory ([3][L][CG] per state), levels run in place: chunks of positions in the
// order that leaves every source unread-yet-unwritten (descending for x_q += W x_{q-s},
// ascending for the transpose), each chunk read, then written, across a barrier.

template <typename acc_t>
struct ExactState {
  acc_t *M, *H, *U;  // [L][CG] each
};

template <typename acc_t>
__device__ __forceinline__ void exact_combine(acc_t& ma, acc_t& ha, acc_t& ua, acc_t mb, acc_t hb,
                                              acc_t ub) {
  const acc_t top = (ma != ma || mb != mb) ? ma + mb : (ma > mb ? ma : mb);
  const acc_t safe = top == neg_inf<acc_t>() ? acc_t(0) : top;
  const acc_t e1 = exp(ma - safe), e2 = exp(mb - safe);
  ha = ha * e1 + hb * e2;
  ua = ua * e1 + ub * e2;
  ma = top;
}

constexpr int kExactPer = 4;  // positions per thread and chunk

// One level (shift s, log weight lw[ch] for channel ch of the group) over the state,
// forward (x_q absorbs W x_{q - s}) or transposed (x_q absorbs W x_{q + s}).
template <int CG, typename acc_t>
__device__ void exact_level(ExactState<acc_t> x, int64_t L, int64_t s, const acc_t* lw,
                            bool transposed) {
  constexpr int kChunkPositions = kThreads * kExactPer / CG;
  const int ch = threadIdx.x % CG, lane = threadIdx.x / CG;
  constexpr int kLanes = kThreads / CG;
  const int64_t chunks = (L + kChunkPositions - 1) / kChunkPositions;
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t q0 = transposed ? k * kChunkPositions : (chunks - 1 - k) * kChunkPositions;
    acc_t nm[kExactPer], nh[kExactPer], nu[kExactPer];
#pragma unroll
    for (int t = 0; t < kExactPer; ++t) {
      const int64_t q = q0 + lane + t * kLanes;
      if (q >= L) continue;
      const int64_t at = q * CG + ch;
      nm[t] = x.M[at];
      nh[t] = x.H[at];
      nu[t] = x.U[at];
      const int64_t src = transposed ? q + s : q - s;
      if (src >= 0 && src < L) {
        const int64_t from = src * CG + ch;
        exact_combine(nm[t], nh[t], nu[t], x.M[from] + lw[ch], x.H[from], x.U[from]);
      }
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kExactPer; ++t) {
      const int64_t q = q0 + lane + t * kLanes;
      if (q >= L) continue;
      const int64_t at = q * CG + ch;
      x.M[at] = nm[t];
      x.H[at] = nh[t];
      x.U[at] = nu[t];
    }
    __syncthreads();
  }
}

// x^0 of group g: (M, H, U) = (A, V, 1) at valid positions, (-inf, 0, 0) elsewhere; then the
// first `levels` levels.
template <int CG, typename scalar_t, typename acc_t>
__device__ void exact_prefix(const ScanArgs<scalar_t, acc_t>& s, ExactState<acc_t> x, int64_t b,
                             int64_t c0, int levels, acc_t* lw_s) {
  for (int64_t k = threadIdx.x; k < s.L * CG; k += blockDim.x) {
    const int64_t pos = k / CG, c = c0 + k % CG;
    acc_t m = neg_inf<acc_t>(), h = 0, u = 0;
    if (c < s.D) {
      const int64_t q = physical(s, c, pos);
      if (valid_at(s, b, q)) {
        const int64_t at = (b * s.L + q) * s.D + c;
        m = static_cast<acc_t>(s.a[at]);
        h = static_cast<acc_t>(s.v[at]);
        u = 1;
      }
    }
    x.M[k] = m;
    x.H[k] = h;
    x.U[k] = u;
  }
  __syncthreads();
  for (int j = 0; j < levels; ++j)
    exact_level<CG>(x, s.L, int64_t{1} << j, lw_s + j * CG, false);
}

// The group's log weights into shared memory [K][CG] (0 for missing channels).
template <int CG, typename scalar_t, typename acc_t>
__device__ void exact_weights(const ScanArgs<scalar_t, acc_t>& s, int64_t c0, acc_t* lw_s) {
  for (int k = threadIdx.x; k < s.K * CG; k += blockDim.x) {
    const int64_t c = c0 + k % CG;
    lw_s[k] = c < s.D ? s.lw[(k / CG) * s.D + c] : acc_t(0);
  }
  __syncthreads();
}

// True for the blocks that must process group g (block-uniform); counts it.
template <typename Args>
__device__ bool exact_take(const Args& s, int64_t g) {
  if (s.flags[g] == 0) return false;
  if (threadIdx.x == 0) atomicAdd(&g_exact_groups, 1ull);
  return true;
}

// grid (slots); scratch [slots][3][L][CG].
template <typename C, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) exact_forward(ScanArgs<scalar_t, acc_t> s,
                                                          acc_t* scratch) {
  constexpr int CG = C::CG;
  __shared__ acc_t lw_s[kMaxLevels * CG];
  const int64_t slot = s.L * CG;
  ExactState<acc_t> x{scratch + blockIdx.x * 3 * slot, nullptr, nullptr};
  x.H = x.M + slot;
  x.U = x.H + slot;
  for (int64_t g = blockIdx.x; g < s.B * s.groups; g += gridDim.x) {
    if (!exact_take(s, g)) continue;
    const int64_t b = g / s.groups, c0 = (g % s.groups) * CG;
    exact_weights<CG>(s, c0, lw_s);
    exact_prefix<CG>(s, x, b, c0, s.K, lw_s);
    for (int64_t k = threadIdx.x; k < s.L * CG; k += blockDim.x) {
      const int64_t pos = k / CG, c = c0 + k % CG;
      if (c >= s.D) continue;
      const int64_t q = physical(s, c, pos);
      const acc_t u = x.U[k];
      const acc_t o = (!valid_at(s, b, q) || u == 0) ? acc_t(0) : x.H[k] / u;
      s.o[(b * s.L + q) * s.D + c] = static_cast<scalar_t>(o);
    }
    __syncthreads();
  }
}

// grid (slots); scratch [slots][6][L][CG]: the forward state X and the adjoint state Y
// (N, P, Q): dLoss/dh = P e^N, dLoss/du = Q e^N. Writes dA, dV of the group and the
// group's d log W into exact_part [B, K, D].
template <typename C, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) exact_backward(ScanArgs<scalar_t, acc_t> s,
                                                           acc_t* scratch, double* exact_part) {
  constexpr int CG = C::CG;
  __shared__ acc_t lw_s[kMaxLevels * CG];
  __shared__ double red[kThreads];
  const int64_t slot = s.L * CG;
  acc_t* base = scratch + blockIdx.x * 6 * slot;
  const ExactState<acc_t> x{base, base + slot, base + 2 * slot};
  const ExactState<acc_t> y{base + 3 * slot, base + 4 * slot, base + 5 * slot};
  for (int64_t g = blockIdx.x; g < s.B * s.groups; g += gridDim.x) {
    if (!exact_take(s, g)) continue;
    const int64_t b = g / s.groups, c0 = (g % s.groups) * CG;
    exact_weights<CG>(s, c0, lw_s);
    exact_prefix<CG>(s, x, b, c0, s.K, lw_s);
    // Output adjoints: O = H / U, so dh = g / u and du = -g O / u, u = U e^M.
    for (int64_t k = threadIdx.x; k < slot; k += blockDim.x) {
      const int64_t pos = k / CG, c = c0 + k % CG;
      acc_t n = neg_inf<acc_t>(), ph = 0, pu = 0;
      if (c < s.D) {
        const int64_t q = physical(s, c, pos);
        const acc_t u = x.U[k];
        if (valid_at(s, b, q) && u != 0) {
          const acc_t go = static_cast<acc_t>(s.grad_o[(b * s.L + q) * s.D + c]);
          ph = go / u;
          pu = -ph * (x.H[k] / u);
          n = -x.M[k];
        }
      }
      y.M[k] = n;
      y.H[k] = ph;
      y.U[k] = pu;
    }
    __syncthreads();
    for (int j = s.K - 1; j >= 0; --j) {
      const int64_t sh = int64_t{1} << j;
      exact_prefix<CG>(s, x, b, c0, j, lw_s);
      // d log W_j: sum_q W_j (dh_q h_{q - s} + du_q u_{q - s}) with the state before level j.
      double part = 0;
      for (int64_t k = threadIdx.x; k < slot; k += blockDim.x) {
        const int64_t pos = k / CG;
        if (pos < sh) continue;
        const int64_t from = k - sh * CG;
        const acc_t lw = lw_s[j * CG + k % CG];
        const double t = double(y.H[k]) * x.H[from] + double(y.U[k]) * x.U[from];
        if (t != 0) part += t * exp(double(y.M[k]) + double(x.M[from]) + double(lw));
      }
      // threadIdx.x % CG is the channel of every k this thread visited (blockDim % CG == 0).
      red[threadIdx.x] = part;
      __syncthreads();
      if (threadIdx.x < CG && c0 + threadIdx.x < s.D) {
        double sum = 0;
        for (int l = threadIdx.x; l < kThreads; l += CG) sum += red[l];
        exact_part[(b * s.K + j) * s.D + c0 + threadIdx.x] = sum;
      }
      __syncthreads();
      exact_level<CG>(y, s.L, sh, lw_s + j * CG, true);
    }
    // dV = e^A dh, dA = e^A (V dh + du), with dh = P e^N, du = Q e^N.
    for (int64_t k = threadIdx.x; k < slot; k += blockDim.x) {
      const int64_t pos = k / CG, c = c0 + k % CG;
      if (c >= s.D) continue;
      const int64_t q = physical(s, c, pos);
      const int64_t at = (b * s.L + q) * s.D + c;
      acc_t ga = 0, gv = 0;
      if (valid_at(s, b, q) && y.M[k] != neg_inf<acc_t>()) {
        const acc_t e = exp(static_cast<acc_t>(s.a[at]) + y.M[k]);
        gv = e * y.H[k];
        ga = e * (static_cast<acc_t>(s.v[at]) * y.H[k] + y.U[k]);
      }
      s.grad_a[at] = static_cast<scalar_t>(ga);
      s.grad_v[at] = static_cast<scalar_t>(gv);
    }
    __syncthreads();
  }
}

// d log W [K, D] in float64: per (level, channel), the blocks' partial sums in a fixed order,
// or the exact kernel's sum for a flagged group.
template <int CG, typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) reduce_log_weight_grad(ScanArgs<scalar_t, acc_t> s,
                                                                   const double* exact_part,
                                                                   double* glw) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(s.K) * s.D) return;
  const int j = static_cast<int>(idx / s.D);
  const int64_t c = idx % s.D;
  double sum = 0;
  for (int64_t b = 0; b < s.B; ++b) {
    if (s.flags[b * s.groups + c / CG]) {
      sum += exact_part[(b * s.K + j) * s.D + c];
    } else if (j < s.m) {
      for (int r = 0; r < s.R; ++r) sum += s.tile_part[((b * s.R + r) * s.m + j) * s.D + c];
    } else {
      for (int x = 0; x < s.col_blocks; ++x)
        sum += s.col_part[((b * s.col_blocks + x) * s.nh + (j - s.m)) * s.D + c];
    }
  }
  glw[idx] = sum;
}

// ---- Host side ----

int levels_for(int64_t L) { return L > 1 ? static_cast<int>(aib_num_levels(L)) : 0; }

struct Shape {
  int K, m, T, R, nh;
  bool large;
};

Shape shape_for(int64_t L) {
  Shape sh;
  sh.K = levels_for(L);
  sh.large = sh.K > 2 * kSmallTileBits;
  const int m = sh.large ? std::max(kSmallTileBits, sh.K - kLargeTileBits) : kSmallTileBits;
  sh.m = std::min(sh.K, m);
  sh.T = 1 << sh.m;
  sh.R = static_cast<int>((L + sh.T - 1) / sh.T);
  sh.nh = sh.K - sh.m;
  return sh;
}

bool fits_fused_path(int64_t L) { return levels_for(L) <= kMaxLevels; }

// Launches `kernel` on the current stream, raising its shared-memory limit past the default
// 48 KB where it needs more, and checks the launch.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, size_t smem, const Args&... args) {
  if (smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, at::cuda::getCurrentCUDAStream()>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Per-call buffers and kernel arguments for one (dtype, size class).
template <typename C, typename scalar_t, typename acc_t>
struct Plan {
  Shape sh;
  ColumnLayout col;
  dim3 tile_grid, col_grid;
  at::Tensor zh, zu, zc, zl, fa, fb, flags;
  ScanArgs<scalar_t, acc_t> s{};

  Plan(const at::Tensor& a, const at::Tensor& v, const at::Tensor& lw, const at::Tensor& mask,
       bool bidir)
      : sh(shape_for(a.size(1))), col(column_layout<C>(sh.R, sh.T)) {
    const int64_t B = a.size(0), L = a.size(1), D = a.size(2);
    const int groups = static_cast<int>((D + C::CG - 1) / C::CG);
    tile_grid = dim3(sh.R, groups, static_cast<unsigned>(B));
    col_grid = dim3((sh.T + col.cols - 1) / col.cols, groups, static_cast<unsigned>(B));
    const auto acc = a.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
    zh = at::empty({B, int64_t(sh.R) * sh.T, D}, acc);
    zu = at::empty_like(zh);
    zc = at::empty({B, sh.R, D}, acc);
    zl = at::empty_like(zc);
    fa = at::empty({B, std::max(sh.nh, 1), sh.R, D}, acc);
    fb = at::empty_like(fa);
    flags = at::zeros({B, groups}, a.options().dtype(at::kInt));
    s.a = a.data_ptr<scalar_t>();
    s.v = v.data_ptr<scalar_t>();
    s.mask = mask.defined() ? mask.data_ptr<bool>() : nullptr;
    s.lw = lw.data_ptr<acc_t>();
    s.B = B;
    s.L = L;
    s.D = D;
    s.K = sh.K;
    s.m = sh.m;
    s.T = sh.T;
    s.R = sh.R;
    s.nh = sh.nh;
    s.groups = groups;
    s.col_blocks = static_cast<int>(col_grid.x);
    s.bidirectional = bidir;
    s.zh = zh.data_ptr<acc_t>();
    s.zu = zu.data_ptr<acc_t>();
    s.zc = zc.data_ptr<acc_t>();
    s.zl = zl.data_ptr<acc_t>();
    s.fa = fa.data_ptr<acc_t>();
    s.fb = fb.data_ptr<acc_t>();
    s.flags = flags.data_ptr<int>();
  }

  size_t tile_smem(bool backward) const {
    const size_t per = size_t(2 * sh.T) * C::CG * sizeof(acc_t);
    return backward ? 6 * per + kThreads * sizeof(double)
                    : 2 * per + 2 * (kThreads + C::CG) * sizeof(acc_t);
  }

  size_t column_smem(bool backward) const {
    const size_t per = size_t(sh.R) * col.cols * C::CG * sizeof(acc_t);
    const size_t factors = 2 * size_t(sh.nh) * sh.R * C::CG * sizeof(acc_t);
    return (backward ? 6 * per + kThreads * sizeof(double) : 2 * per) + factors;
  }

  void tile_and_factors() {
    launch(tile_forward<C, scalar_t, acc_t>, tile_grid, tile_smem(false), s);
    if (sh.nh > 0) {
      const auto blocks = static_cast<unsigned>((s.B * s.D + kThreads - 1) / kThreads);
      launch(row_factors<C::RB, C::CG, scalar_t, acc_t>, dim3(blocks), 0, s);
    }
  }

  // Exact-kernel slots: each holds `states` [L][CG] arrays of acc_t.
  int64_t exact_slots(int states) const {
    const int64_t per = int64_t(states) * s.L * C::CG * int64_t(sizeof(acc_t));
    return std::max<int64_t>(1, std::min<int64_t>(kMaxExactSlots, kExactScratchBytes / per));
  }
};

// Remembers which devices ran the kernels, so that the count can be read on each.
std::atomic<uint64_t> g_devices_used{0};

int64_t read_cuda_fallbacks() {
  const uint64_t used = g_devices_used.load();
  int64_t total = 0;
  for (int d = 0; d < 64; ++d) {
    if (!(used & (uint64_t{1} << d))) continue;
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(d));
    unsigned long long n = 0;
    C10_CUDA_CHECK(cudaMemcpyFromSymbol(&n, g_exact_groups, sizeof(n)));
    total += static_cast<int64_t>(n);
  }
  return total;
}

// The one-time warning without waiting for the device: each call (outside graph capture)
// looks at the count copied to pinned memory by an earlier call, if that copy is done, and
// queues the next copy.
void watch_fallbacks(int device) {
  if (at::cuda::currentStreamCaptureStatusMayInitCtx() != at::cuda::CaptureStatus::None) return;
  struct Watch {
    unsigned long long* host = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  static std::mutex mu;
  static Watch watches[64];
  if (device < 0 || device >= 64) return;
  const std::lock_guard<std::mutex> lock(mu);
  Watch& w = watches[device];
  if (w.host == nullptr) {
    C10_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&w.host), sizeof(*w.host),
                                 cudaHostAllocDefault));
    *w.host = 0;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&w.done, cudaEventDisableTiming));
  }
  if (w.pending) {
    const cudaError_t st = cudaEventQuery(w.done);
    if (st == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: clear it
      return;
    }
    C10_CUDA_CHECK(st);
    w.pending = false;
    if (*w.host > 0) aib_note_fallbacks(static_cast<int64_t>(*w.host));
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  C10_CUDA_CHECK(cudaMemcpyFromSymbolAsync(w.host, g_exact_groups, sizeof(*w.host), 0,
                                           cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaEventRecord(w.done, stream));
  w.pending = true;
}

void note_device(const at::Tensor& a) {
  const int d = a.get_device();
  if (d >= 0 && d < 64) g_devices_used.fetch_or(uint64_t{1} << d);
  watch_fallbacks(d);
}

template <typename C, typename scalar_t, typename acc_t>
void forward_fused(const at::Tensor& a, const at::Tensor& v, const at::Tensor& lw,
                   const at::Tensor& mask, bool bidir, at::Tensor& o) {
  Plan<C, scalar_t, acc_t> plan(a, v, lw, mask, bidir);
  plan.s.o = o.data_ptr<scalar_t>();
  plan.tile_and_factors();
  launch(column_forward<C, scalar_t, acc_t>, plan.col_grid, plan.column_smem(false), plan.s);
  const int64_t slots = plan.exact_slots(3);
  at::Tensor scratch = at::empty({slots * 3 * a.size(1) * C::CG}, plan.zh.options());
  launch(exact_forward<C, scalar_t, acc_t>, dim3(static_cast<unsigned>(slots)), 0, plan.s,
         scratch.data_ptr<acc_t>());
}

template <typename C, typename scalar_t, typename acc_t>
void backward_fused(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& v,
                    const at::Tensor& lw, const at::Tensor& mask, bool bidir, at::Tensor& ga,
                    at::Tensor& gv, at::Tensor& glw) {
  Plan<C, scalar_t, acc_t> plan(a, v, lw, mask, bidir);
  auto& s = plan.s;
  s.grad_o = grad.data_ptr<scalar_t>();
  s.grad_a = ga.data_ptr<scalar_t>();
  s.grad_v = gv.data_ptr<scalar_t>();
  const auto dbl = a.options().dtype(at::kDouble);
  const int64_t B = a.size(0), D = a.size(2);
  // Every entry is written by exactly one block, so none needs zeroing.
  at::Tensor tile_part = at::empty({B, plan.sh.R, std::max(plan.sh.m, 1), D}, dbl);
  at::Tensor col_part = at::empty({B, s.col_blocks, std::max(plan.sh.nh, 1), D}, dbl);
  at::Tensor exact_part = at::empty({B, std::max(plan.sh.K, 1), D}, dbl);
  s.tile_part = tile_part.data_ptr<double>();
  s.col_part = col_part.data_ptr<double>();
  plan.tile_and_factors();
  launch(column_backward<C, scalar_t, acc_t>, plan.col_grid, plan.column_smem(true), s);
  launch(tile_backward<C, scalar_t, acc_t>, plan.tile_grid, plan.tile_smem(true), s);
  const int64_t slots = plan.exact_slots(6);
  at::Tensor scratch = at::empty({slots * 6 * a.size(1) * C::CG}, plan.zh.options());
  launch(exact_backward<C, scalar_t, acc_t>, dim3(static_cast<unsigned>(slots)), 0, s,
         scratch.data_ptr<acc_t>(), exact_part.data_ptr<double>());
  if (plan.sh.K > 0) {
    const auto blocks = static_cast<unsigned>((int64_t(plan.sh.K) * D + kThreads - 1) / kThreads);
    launch(reduce_log_weight_grad<C::CG, scalar_t, acc_t>, dim3(blocks), 0, s,
           static_cast<const double*>(exact_part.data_ptr<double>()), glw.data_ptr<double>());
  }
}

template <typename scalar_t, typename acc_t>
void forward_dispatch(const at::Tensor& a, const at::Tensor& v, const at::Tensor& lw,
                      const at::Tensor& m, bool bidir, at::Tensor& o) {
  if (shape_for(a.size(1)).large)
    forward_fused<Cfg<acc_t, true>, scalar_t, acc_t>(a, v, lw, m, bidir, o);
  else
    forward_fused<Cfg<acc_t, false>, scalar_t, acc_t>(a, v, lw, m, bidir, o);
}

template <typename scalar_t, typename acc_t>
void backward_dispatch(const at::Tensor& go, const at::Tensor& a, const at::Tensor& v,
                       const at::Tensor& lw, const at::Tensor& m, bool bidir, at::Tensor& ga,
                       at::Tensor& gv, at::Tensor& glw) {
  if (shape_for(a.size(1)).large)
    backward_fused<Cfg<acc_t, true>, scalar_t, acc_t>(go, a, v, lw, m, bidir, ga, gv, glw);
  else
    backward_fused<Cfg<acc_t, false>, scalar_t, acc_t>(go, a, v, lw, m, bidir, ga, gv, glw);
}

at::Tensor aib_scan_cuda(const at::Tensor& a_in, const at::Tensor& v_in,
                         const std::optional<at::Tensor>& w_opt,
                         const std::optional<at::Tensor>& mask_opt,
                         c10::string_view direction_s, c10::string_view weights_s) {
  const Direction direction = detail::direction_arg("aib_scan", direction_s);
  const AIBWeights weights = aib_weights_arg("aib_scan", weights_s);
  const at::Tensor w = detail::or_undefined(w_opt), mask = detail::or_undefined(mask_opt);
  aib_check_inputs("aib_scan", a_in, v_in, w, mask, direction, weights);
  const c10::cuda::CUDAGuard guard(a_in.device());
  at::Tensor o = at::empty_like(a_in, at::MemoryFormat::Contiguous);
  if (a_in.numel() == 0) return o;
  if (!fits_fused_path(a_in.size(1))) {
    aib_count_stable_fallback();
    return aib_scan_stable(a_in, v_in, w, mask, direction, weights);
  }
  note_device(a_in);
  const at::Tensor a = a_in.contiguous(), v = v_in.contiguous();
  const at::Tensor m = mask.defined() ? mask.contiguous() : mask;
  const at::Tensor lw = aib_log_weights(w, a, weights);
  const bool bidir = direction == Direction::bidirectional;
  if (a.scalar_type() == at::kBFloat16)
    forward_dispatch<at::BFloat16, float>(a, v, lw, m, bidir, o);
  else if (a.scalar_type() == at::kDouble)
    forward_dispatch<double, double>(a, v, lw, m, bidir, o);
  else
    forward_dispatch<float, float>(a, v, lw, m, bidir, o);
  return o;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> aib_scan_backward_cuda(
    const at::Tensor& grad_in, const at::Tensor& a_in, const at::Tensor& v_in,
    const std::optional<at::Tensor>& w_opt, const std::optional<at::Tensor>& mask_opt,
    c10::string_view direction_s, c10::string_view weights_s) {
  const Direction direction = detail::direction_arg("_aib_scan_backward", direction_s);
  const AIBWeights weights = aib_weights_arg("_aib_scan_backward", weights_s);
  const at::Tensor w = detail::or_undefined(w_opt), mask = detail::or_undefined(mask_opt);
  aib_check_inputs("_aib_scan_backward", a_in, v_in, w, mask, direction, weights);
  const c10::cuda::CUDAGuard guard(a_in.device());
  if (a_in.numel() == 0)
    return {at::zeros_like(a_in), at::zeros_like(v_in),
            w.defined() ? at::zeros_like(w) : at::empty({0}, a_in.options())};
  if (!fits_fused_path(a_in.size(1))) {
    aib_count_stable_fallback();
    return aib_scan_stable_backward(grad_in, a_in, v_in, w, mask, direction, weights);
  }
  note_device(a_in);
  const at::Tensor a = a_in.contiguous(), v = v_in.contiguous();
  const at::Tensor m = mask.defined() ? mask.contiguous() : mask;
  const at::Tensor lw = aib_log_weights(w, a, weights);
  const bool bidir = direction == Direction::bidirectional;
  const at::Tensor go = grad_in.to(a.scalar_type()).contiguous();
  at::Tensor ga = at::empty_like(a), gv = at::empty_like(v);
  at::Tensor glw = at::zeros(lw.sizes(), lw.options().dtype(at::kDouble));
  if (a.scalar_type() == at::kBFloat16)
    backward_dispatch<at::BFloat16, float>(go, a, v, lw, m, bidir, ga, gv, glw);
  else if (a.scalar_type() == at::kDouble)
    backward_dispatch<double, double>(go, a, v, lw, m, bidir, ga, gv, glw);
  else
    backward_dispatch<float, float>(go, a, v, lw, m, bidir, ga, gv, glw);
  return {ga, gv, aib_grad_w_from_log(glw.to(lw.scalar_type()), w, weights)};
}

// Makes aib_scan_fallbacks() read the device counter once the CUDA kernels are linked in.
const bool g_reader_registered = [] {
  aib_register_cuda_fallback_reader(&read_cuda_fallbacks);
  return true;
}();

}  // namespace

TORCH_LIBRARY_IMPL(seqmix, CUDA, m) {
  m.impl("aib_scan", &aib_scan_cuda);
  m.impl("_aib_scan_backward", &aib_scan_backward_cuda);
}

}  // namespace seqmix::ops
