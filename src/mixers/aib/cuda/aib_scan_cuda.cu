// seqmix::aib_scan and seqmix::_aib_scan_backward under the CUDA dispatch key: fused kernels
// for the log-depth weighted prefix sum O = H / U of AIB (Weird) attention (weird-net eq. 5-9,
// Algorithm 1; the contract is include/seqmix/ops/aib_scan.h).
//
// Method. With x = (E V, E), E = exp(A) (0 at padded positions), the scan is
//   S x at i = sum_{d >= 0} a_d x_{i-d},   a_d = prod_{j: bit j of d} W_j,
// the product of the K levels L_j x = x + W_j shift_{2^j} x. The levels commute, so S splits
// at m = min(K, 8) into the levels with shifts below T = 2^m and those at or above it:
//   1. tile pass: per tile of T positions, the low levels over the tile and the T positions
//      before it (a window of T - 1 back is all the low levels reach), in shared memory;
//      writes z = S_lo x (float32 for float32/bfloat16 A, float64 for float64 A);
//   2. column pass: viewing z as R = ceil(L / T) rows of T, the high levels are the same scan
//      down each column (shift 2^(j-m) rows); a column of R <= 256 rows sits in shared memory;
//      writes O = H / U.
// Backward (g = dLoss/dO): the column pass recomputes H and U, forms dH = g / U and
// dU = -g O / U and runs the transposed high levels on them (the suffix scan S_hi^T); the
// tile pass then runs the transposed low levels (with the T positions after the tile) and
// writes dV = E P_H and dA = E V P_H + E P_U. The gradient of log W_j is
// <S_{>j}^T y, W_j shift_{2^j} S_{<j} x>: each pass recomputes S_{<j} x from its loaded
// input for each of its levels (no snapshots in memory) and writes per-block partial sums in
// float64, summed afterwards (deterministic).
//
// Exactness. The arithmetic is plain floating point with E = exp(A), no per-window maximum.
// Every valid position is checked where its result is final: U >= 2^-96 (2^-900 in float64,
// so no significant term was subnormal), H, U and the gradients finite. Any failure (|A| past
// ~60, huge distance weights, non-finite inputs) sets a flag, and the whole call is answered
// by aib_scan_stable, the ATen scan that carries a maximum per position: exact for any finite
// A, NaN where the inputs hold NaN, as on the CPU. Sequences longer than 256 T = 65,536 take
// the same ATen path.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>

#include "../aib_scan_internal.h"
#include "ops/dispatch.h"
#include "ops/low_precision.h"

namespace seqmix::ops {
namespace {

constexpr int kMaxTileBits = 8;  // T = 2^m <= 256 positions per tile
constexpr int kMaxRows = 256;    // R <= 256 rows: L <= 65,536 on the fused path
constexpr int kThreads = 256;

// Channels per block: 8 consecutive channels make a 32-byte sector per position (float32);
// float64 takes 4 to fit the backward tile pass's six buffers in shared memory.
template <typename acc_t>
constexpr int channels_per_block() {
  return sizeof(acc_t) == 8 ? 4 : 8;
}

template <typename acc_t>
__device__ __forceinline__ acc_t tiny();
template <>
__device__ __forceinline__ float tiny<float>() {
  return 0x1p-96f;
}
template <>
__device__ __forceinline__ double tiny<double>() {
  return 0x1p-900;
}

template <typename scalar_t, typename acc_t>
struct ScanArgs {
  const scalar_t* a;
  const scalar_t* v;
  const bool* mask;  // [B, L] or null
  const acc_t* lw;   // [>= K, D] log W
  const scalar_t* grad_o;
  int64_t B, L, D;
  int K, m, T, R;
  bool bidirectional;
  acc_t *zh, *zu;    // [B, R T, D] S_lo x (forward), S_hi^T y (backward), logical positions
  scalar_t* o;       // forward output
  scalar_t *grad_a, *grad_v;
  double* grad_lw_part;  // [blocks, K, D] per-block partial sums of dLoss/d log W
  int* failed;
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

// x = (E V, E) at logical position p of (b, c); 0 outside [0, L) and at padded positions.
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ void load_x(const ScanArgs<scalar_t, acc_t>& s, int64_t b, int64_t c,
                                       int64_t p, acc_t& h, acc_t& u) {
  h = u = acc_t(0);
  if (p < 0 || p >= s.L) return;
  const int64_t q = physical(s, c, p);
  if (!valid_at(s, b, q)) return;
  const int64_t at = (b * s.L + q) * s.D + c;
  const acc_t e = exp(static_cast<acc_t>(s.a[at]));
  u = e;
  h = e * static_cast<acc_t>(s.v[at]);
}

template <typename acc_t>
__device__ __forceinline__ acc_t level_weight(const acc_t* lw, int64_t D, int64_t c, int j,
                                              bool active) {
  return active ? exp(lw[j * D + c]) : acc_t(0);
}

// One level on n positions of each of the block's sequences, in place in shared memory
// (position-major: element i of sequence q at [i * nseq + q]), for both buffers:
// x[i] += w x[i - s] (forward) or x[i] += w x[i + s] (transposed). Each thread owns positions
// lane, lane + nlanes, ... of sequence `seq`; all threads of the block must call it.
template <int kPerThread, typename acc_t>
__device__ void level(acc_t* x1, acc_t* x2, int nseq, int seq, int lane, int nlanes, int n,
                      int s, acc_t w, bool transposed) {
  acc_t n1[kPerThread], n2[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = lane + k * nlanes;
    if (i < n) {
      const int src = transposed ? i + s : i - s;
      const bool in = src >= 0 && src < n;
      n1[k] = x1[i * nseq + seq] + (in ? w * x1[src * nseq + seq] : acc_t(0));
      n2[k] = x2[i * nseq + seq] + (in ? w * x2[src * nseq + seq] : acc_t(0));
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = lane + k * nlanes;
    if (i < n) {
      x1[i * nseq + seq] = n1[k];
      x2[i * nseq + seq] = n2[k];
    }
  }
  __syncthreads();
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
template <typename acc_t>
struct TilePlace {
  static constexpr int CG = channels_per_block<acc_t>();
  static constexpr int kLanes = kThreads / CG;
  static constexpr int kPer = (2 << kMaxTileBits) / kLanes;
  int seq, lane, n;
  int64_t r, b, c;
  bool active;

  template <typename Args>
  __device__ explicit TilePlace(const Args& s)
      : seq(threadIdx.x % CG), lane(threadIdx.x / CG), n(2 * s.T), r(blockIdx.x),
        b(blockIdx.z), c(int64_t(blockIdx.y) * CG + threadIdx.x % CG), active(c < s.D) {}
};

// The low levels 0 .. last - 1 over the tile buffers in shared memory, in place.
template <typename scalar_t, typename acc_t>
__device__ void low_levels(const ScanArgs<scalar_t, acc_t>& s, const TilePlace<acc_t>& p,
                           acc_t* h, acc_t* u, int last) {
  using TP = TilePlace<acc_t>;
  for (int j = 0; j < last; ++j)
    level<TP::kPer>(h, u, TP::CG, p.seq, p.lane, TP::kLanes, p.n, 1 << j,
                    level_weight(s.lw, s.D, p.c, j, p.active), false);
}

// ---- Pass 1, forward: z = S_lo x per tile ----
// grid (R, ceil(D / CG), B); shared: h and u over the tile and the T positions before it.
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    tile_forward(ScanArgs<scalar_t, acc_t> s) {
  const TilePlace<acc_t> p(s);
  constexpr int CG = TilePlace<acc_t>::CG, kLanes = TilePlace<acc_t>::kLanes;
  const int seq = p.seq, lane = p.lane, n = p.n;
  const int64_t b = p.b, c = p.c;
  const bool active = p.active;
  extern __shared__ unsigned char smem_raw[];
  acc_t* sh = reinterpret_cast<acc_t*>(smem_raw);
  acc_t* su = sh + n * CG;
  const int64_t base = p.r * s.T - s.T;
  for (int i = lane; i < n; i += kLanes) {
    acc_t h = 0, u = 0;
    if (active) load_x(s, b, c, base + i, h, u);
    sh[i * CG + seq] = h;
    su[i * CG + seq] = u;
  }
  __syncthreads();
  low_levels(s, p, sh, su, s.m);
  if (!active) return;
  for (int i = s.T + lane; i < n; i += kLanes) {
    const int64_t at = (b * int64_t(s.R) * s.T + base + i) * s.D + c;
    s.zh[at] = sh[i * CG + seq];
    s.zu[at] = su[i * CG + seq];
  }
}

// The column pass's layout: a block takes CG channels of `cols` adjacent columns; each
// sequence (column, channel) has R rows, spread over `lanes` threads.
struct ColumnLayout {
  int cols, lanes;
};

__host__ __device__ inline ColumnLayout column_layout(int R, int CG) {
  int rows_p2 = 1;
  while (rows_p2 < R) rows_p2 <<= 1;
  const int lanes_per_channel = kThreads / CG;  // 32 or 64
  const int lanes = rows_p2 < lanes_per_channel ? rows_p2 : lanes_per_channel;
  return {lanes_per_channel / lanes, lanes};
}

// A column-pass thread's place: sequence `seq` of its block (channel c of column t, batch b),
// rows lane, lane + lanes, ... (column_layout: every thread of the block has one).
struct ColumnPlace {
  int nseq, seq, lane, lanes, cols;
  int64_t b, c, t;
  bool active;
};

template <int CG, typename Args>
__device__ ColumnPlace column_place(const Args& s) {
  const ColumnLayout lay = column_layout(s.R, CG);
  ColumnPlace p;
  p.cols = lay.cols;
  p.lanes = lay.lanes;
  p.nseq = lay.cols * CG;
  p.seq = threadIdx.x % p.nseq;
  p.lane = threadIdx.x / p.nseq;
  p.b = blockIdx.z;
  p.c = int64_t(blockIdx.y) * CG + p.seq % CG;
  p.t = int64_t(blockIdx.x) * lay.cols + p.seq / CG;
  p.active = p.c < s.D && p.t < s.T;
  return p;
}

// The rows of the thread's column of (zh, zu) into shared memory (h, u); then a barrier.
template <typename scalar_t, typename acc_t>
__device__ void load_column(const ScanArgs<scalar_t, acc_t>& s, const ColumnPlace& p, acc_t* h,
                            acc_t* u) {
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
  __syncthreads();
}

// The high levels m .. last - 1 down the columns in shared memory, in place.
template <int kPer, typename scalar_t, typename acc_t>
__device__ void high_levels(const ScanArgs<scalar_t, acc_t>& s, const ColumnPlace& p, acc_t* h,
                            acc_t* u, int last) {
  for (int j = s.m; j < last; ++j)
    level<kPer>(h, u, p.nseq, p.seq, p.lane, p.lanes, s.R, 1 << (j - s.m),
                level_weight(s.lw, s.D, p.c, j, p.active), false);
}

// ---- Pass 2, forward: the high levels down each column, then O = H / U ----
// grid (ceil(T / cols), ceil(D / CG), B).
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    column_forward(ScanArgs<scalar_t, acc_t> s) {
  constexpr int CG = channels_per_block<acc_t>();
  constexpr int kPer = kMaxRows * CG / kThreads;
  const ColumnPlace p = column_place<CG>(s);
  extern __shared__ unsigned char smem_raw[];
  acc_t* sh = reinterpret_cast<acc_t*>(smem_raw);
  acc_t* su = sh + s.R * p.nseq;
  load_column(s, p, sh, su);
  high_levels<kPer>(s, p, sh, su, s.K);
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
  if (bad) atomicOr(s.failed, 1);
}

// ---- Pass 2, backward: recompute H, U; y = (g / U, -g O / U); y <- S_hi^T y; grad of the
// high levels ----
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    column_backward(ScanArgs<scalar_t, acc_t> s) {
  constexpr int CG = channels_per_block<acc_t>();
  constexpr int kPer = kMaxRows * CG / kThreads;
  const ColumnPlace p = column_place<CG>(s);
  extern __shared__ unsigned char smem_raw[];
  const int count = s.R * p.nseq;
  acc_t* z0h = reinterpret_cast<acc_t*>(smem_raw);
  acc_t *z0u = z0h + count, *zwh = z0u + count, *zwu = zwh + count, *yh = zwu + count,
        *yu = yh + count;
  double* red = reinterpret_cast<double*>(yu + count);
  const int seq = p.seq, nseq = p.nseq;
  load_column(s, p, z0h, z0u);
  copy_buffers(zwh, zwu, z0h, z0u, count);
  high_levels<kPer>(s, p, zwh, zwu, s.K);
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
  const int64_t block = (int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int channels = static_cast<int>(s.D - blockIdx.y * CG < CG ? s.D - blockIdx.y * CG : CG);
  for (int j = s.K - 1; j >= s.m; --j) {
    const int shift = 1 << (j - s.m);
    const acc_t w = level_weight(s.lw, s.D, p.c, j, p.active);
    // S_{<j} z: the high levels below j, from the loaded z.
    copy_buffers(zwh, zwu, z0h, z0u, count);
    high_levels<kPer>(s, p, zwh, zwu, j);
    double part = 0;
    for (int r = p.lane; r < s.R; r += p.lanes)
      if (r >= shift)
        part += double(w) * (double(yh[r * nseq + seq]) * zwh[(r - shift) * nseq + seq] +
                             double(yu[r * nseq + seq]) * zwu[(r - shift) * nseq + seq]);
    block_channel_sum<CG>(red, p.active ? part : 0.0, nseq, seq, p.lane, p.lanes, p.cols,
                          s.grad_lw_part + (block * s.K + j) * s.D + blockIdx.y * CG,
                          channels);
    level<kPer>(yh, yu, nseq, seq, p.lane, p.lanes, s.R, shift, w, true);
  }
  if (bad) atomicOr(s.failed, 1);
  if (!p.active) return;
  const int64_t RT = int64_t(s.R) * s.T;
  for (int r = p.lane; r < s.R; r += p.lanes) {
    const int64_t at = (p.b * RT + r * s.T + p.t) * s.D + p.c;
    s.zh[at] = yh[r * nseq + seq];
    s.zu[at] = yu[r * nseq + seq];
  }
}

// ---- Pass 1, backward: P = S_lo^T (S_hi^T y), the input gradients, grad of the low levels ---
// x over [rT - T, rT + T) (buffer index i <-> position rT - T + i), y over [rT, rT + 2T)
// (index i <-> position rT + i).
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    tile_backward(ScanArgs<scalar_t, acc_t> s) {
  const TilePlace<acc_t> p(s);
  constexpr int CG = TilePlace<acc_t>::CG, kLanes = TilePlace<acc_t>::kLanes;
  constexpr int kPer = TilePlace<acc_t>::kPer;
  const int seq = p.seq, lane = p.lane, n = p.n, count = n * CG;
  const int64_t r = p.r, b = p.b, c = p.c;
  const bool active = p.active;
  extern __shared__ unsigned char smem_raw[];
  acc_t* x0h = reinterpret_cast<acc_t*>(smem_raw);
  acc_t *x0u = x0h + count, *xwh = x0u + count, *xwu = xwh + count, *yh = xwu + count,
        *yu = yh + count;
  double* red = reinterpret_cast<double*>(yu + count);
  const int64_t start = r * s.T, RT = int64_t(s.R) * s.T;
  for (int i = lane; i < n; i += kLanes) {
    acc_t h = 0, u = 0;
    if (active) load_x(s, b, c, start - s.T + i, h, u);
    x0h[i * CG + seq] = h;
    x0u[i * CG + seq] = u;
    acc_t dh = 0, du = 0;
    const int64_t pos = start + i;
    if (active && pos < RT) {
      dh = s.zh[(b * RT + pos) * s.D + c];
      du = s.zu[(b * RT + pos) * s.D + c];
    }
    yh[i * CG + seq] = dh;
    yu[i * CG + seq] = du;
  }
  __syncthreads();
  const int64_t block = (int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int channels = static_cast<int>(s.D - blockIdx.y * CG < CG ? s.D - blockIdx.y * CG : CG);
  for (int j = s.m - 1; j >= 0; --j) {
    const int shift = 1 << j;
    const acc_t w = level_weight(s.lw, s.D, c, j, active);
    copy_buffers(xwh, xwu, x0h, x0u, count);
    low_levels(s, p, xwh, xwu, j);
    double part = 0;
    for (int i = lane; i < s.T; i += kLanes) {  // the tile's positions
      const int xi = i + s.T - shift;
      part += double(w) * (double(yh[i * CG + seq]) * xwh[xi * CG + seq] +
                           double(yu[i * CG + seq]) * xwu[xi * CG + seq]);
    }
    block_channel_sum<CG>(red, active ? part : 0.0, CG, seq, lane, kLanes, 1,
                             s.grad_lw_part + (block * s.K + j) * s.D + blockIdx.y * CG,
                             channels);
    level<kPer>(yh, yu, CG, seq, lane, kLanes, n, shift, w, true);
  }
  if (!active) return;
  bool bad = false;
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
  if (bad) atomicOr(s.failed, 1);
}

// ---- Host side ----

int levels_for(int64_t L) { return L > 1 ? static_cast<int>(aib_num_levels(L)) : 0; }

struct Shape {
  int K, m, T, R;
};

Shape shape_for(int64_t L) {
  Shape sh;
  sh.K = levels_for(L);
  sh.m = sh.K < kMaxTileBits ? sh.K : kMaxTileBits;
  sh.T = 1 << sh.m;
  sh.R = static_cast<int>((L + sh.T - 1) / sh.T);
  return sh;
}

bool fits_fused_path(int64_t L) { return shape_for(L).R <= kMaxRows; }

// Launches `kernel` on the current stream, raising its shared-memory limit past the default
// 48 KB where it needs more, and checks the launch.
template <typename Args>
void launch(void (*kernel)(Args), dim3 grid, size_t smem, const Args& args) {
  if (smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, at::cuda::getCurrentCUDAStream()>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename acc_t>
ScanArgs<scalar_t, acc_t> make_args(const at::Tensor& a, const at::Tensor& v,
                                    const at::Tensor& lw, const at::Tensor& mask, bool bidir,
                                    const Shape& sh, at::Tensor& zh, at::Tensor& zu,
                                    at::Tensor& failed) {
  ScanArgs<scalar_t, acc_t> s{};
  s.a = a.data_ptr<scalar_t>();
  s.v = v.data_ptr<scalar_t>();
  s.mask = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  s.lw = lw.data_ptr<acc_t>();
  s.B = a.size(0);
  s.L = a.size(1);
  s.D = a.size(2);
  s.K = sh.K;
  s.m = sh.m;
  s.T = sh.T;
  s.R = sh.R;
  s.bidirectional = bidir;
  s.zh = zh.data_ptr<acc_t>();
  s.zu = zu.data_ptr<acc_t>();
  s.failed = failed.data_ptr<int>();
  return s;
}

template <typename acc_t>
size_t tile_smem(const Shape& sh, bool backward) {
  const size_t per = size_t(2 * sh.T) * channels_per_block<acc_t>() * sizeof(acc_t);
  return backward ? 6 * per + kThreads * sizeof(double) : 2 * per;
}

template <typename acc_t>
size_t column_smem(const Shape& sh, bool backward) {
  constexpr int CG = channels_per_block<acc_t>();
  const ColumnLayout lay = column_layout(sh.R, CG);
  const size_t per = size_t(sh.R) * lay.cols * CG * sizeof(acc_t);
  return backward ? 6 * per + kThreads * sizeof(double) : 2 * per;
}

template <typename acc_t>
dim3 tile_grid(const Shape& sh, int64_t B, int64_t D) {
  constexpr int CG = channels_per_block<acc_t>();
  return dim3(sh.R, static_cast<unsigned>((D + CG - 1) / CG), static_cast<unsigned>(B));
}

template <typename acc_t>
dim3 column_grid(const Shape& sh, int64_t B, int64_t D) {
  constexpr int CG = channels_per_block<acc_t>();
  const ColumnLayout lay = column_layout(sh.R, CG);
  return dim3((sh.T + lay.cols - 1) / lay.cols, static_cast<unsigned>((D + CG - 1) / CG),
              static_cast<unsigned>(B));
}

template <typename scalar_t, typename acc_t>
bool forward_fused(const at::Tensor& a, const at::Tensor& v, const at::Tensor& lw,
                   const at::Tensor& mask, bool bidir, at::Tensor& o) {
  const Shape sh = shape_for(a.size(1));
  const auto acc_opts = a.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
  at::Tensor zh = at::empty({a.size(0), int64_t(sh.R) * sh.T, a.size(2)}, acc_opts);
  at::Tensor zu = at::empty_like(zh);
  at::Tensor failed = at::zeros({1}, a.options().dtype(at::kInt));
  auto s = make_args<scalar_t, acc_t>(a, v, lw, mask, bidir, sh, zh, zu, failed);
  s.o = o.data_ptr<scalar_t>();
  launch(tile_forward<scalar_t, acc_t>, tile_grid<acc_t>(sh, s.B, s.D), tile_smem<acc_t>(sh, false), s);
  launch(column_forward<scalar_t, acc_t>, column_grid<acc_t>(sh, s.B, s.D),
         column_smem<acc_t>(sh, false), s);
  return failed.item<int>() == 0;
}

template <typename scalar_t, typename acc_t>
bool backward_fused(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& v,
                    const at::Tensor& lw, const at::Tensor& mask, bool bidir, at::Tensor& ga,
                    at::Tensor& gv, at::Tensor& glw) {
  const Shape sh = shape_for(a.size(1));
  const auto acc_opts = a.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
  at::Tensor zh = at::empty({a.size(0), int64_t(sh.R) * sh.T, a.size(2)}, acc_opts);
  at::Tensor zu = at::empty_like(zh);
  at::Tensor failed = at::zeros({1}, a.options().dtype(at::kInt));
  auto s = make_args<scalar_t, acc_t>(a, v, lw, mask, bidir, sh, zh, zu, failed);
  s.grad_o = grad.data_ptr<scalar_t>();
  s.grad_a = ga.data_ptr<scalar_t>();
  s.grad_v = gv.data_ptr<scalar_t>();
  const dim3 tg = tile_grid<acc_t>(sh, s.B, s.D), cg = column_grid<acc_t>(sh, s.B, s.D);
  const int K = std::max(sh.K, 1);
  const auto part_opts = a.options().dtype(at::kDouble);
  at::Tensor col_part = at::zeros({int64_t(cg.x) * cg.y * cg.z, K, s.D}, part_opts);
  at::Tensor tile_part = at::zeros({int64_t(tg.x) * tg.y * tg.z, K, s.D}, part_opts);
  launch(tile_forward<scalar_t, acc_t>, tg, tile_smem<acc_t>(sh, false), s);
  s.grad_lw_part = col_part.data_ptr<double>();
  launch(column_backward<scalar_t, acc_t>, cg, column_smem<acc_t>(sh, true), s);
  s.grad_lw_part = tile_part.data_ptr<double>();
  launch(tile_backward<scalar_t, acc_t>, tg, tile_smem<acc_t>(sh, true), s);
  if (sh.K > 0)
    glw.narrow(0, 0, sh.K)
        .copy_((col_part.sum(0) + tile_part.sum(0)).narrow(0, 0, sh.K));
  return failed.item<int>() == 0;
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
  if (!fits_fused_path(a_in.size(1)))
    return aib_scan_stable(a_in, v_in, w, mask, direction, weights);
  const at::Tensor a = a_in.contiguous(), v = v_in.contiguous();
  const at::Tensor m = mask.defined() ? mask.contiguous() : mask;
  const at::Tensor lw = aib_log_weights(w, a, weights);
  const bool bidir = direction == Direction::bidirectional;
  bool ok = false;
  if (a.scalar_type() == at::kBFloat16)
    ok = forward_fused<at::BFloat16, float>(a, v, lw, m, bidir, o);
  else if (a.scalar_type() == at::kDouble)
    ok = forward_fused<double, double>(a, v, lw, m, bidir, o);
  else
    ok = forward_fused<float, float>(a, v, lw, m, bidir, o);
  return ok ? o : aib_scan_stable(a_in, v_in, w, mask, direction, weights);
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
  if (!fits_fused_path(a_in.size(1)))
    return aib_scan_stable_backward(grad_in, a_in, v_in, w, mask, direction, weights);
  const at::Tensor a = a_in.contiguous(), v = v_in.contiguous();
  const at::Tensor m = mask.defined() ? mask.contiguous() : mask;
  const at::Tensor lw = aib_log_weights(w, a, weights);
  const bool bidir = direction == Direction::bidirectional;
  const at::Tensor go = grad_in.to(a.scalar_type()).contiguous();
  at::Tensor ga = at::empty_like(a), gv = at::empty_like(v);
  at::Tensor glw = at::zeros(lw.sizes(), lw.options().dtype(at::kDouble));
  bool ok = false;
  if (a.scalar_type() == at::kBFloat16)
    ok = backward_fused<at::BFloat16, float>(go, a, v, lw, m, bidir, ga, gv, glw);
  else if (a.scalar_type() == at::kDouble)
    ok = backward_fused<double, double>(go, a, v, lw, m, bidir, ga, gv, glw);
  else
    ok = backward_fused<float, float>(go, a, v, lw, m, bidir, ga, gv, glw);
  if (!ok) return aib_scan_stable_backward(grad_in, a_in, v_in, w, mask, direction, weights);
  return {ga, gv, aib_grad_w_from_log(glw.to(lw.scalar_type()), w, weights)};
}

}  // namespace

TORCH_LIBRARY_IMPL(seqmix, CUDA, m) {
  m.impl("aib_scan", &aib_scan_cuda);
  m.impl("_aib_scan_backward", &aib_scan_backward_cuda);
}

}  // namespace seqmix::ops
