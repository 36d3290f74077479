// seqmix::ces_scan and seqmix::_ces_scan_backward under the CUDA dispatch key: the complex
// diagonal recurrence of ETSMLP's CES (etsmlp eq. 10 and 14; the contract is
// include/seqmix/ops/ces_scan.h) as a single-pass chunked scan with decoupled look-back.
//
// The parts. Per channel the op runs one or two parts: the causal part (parameter row h,
// s_t = mu s_{t-1} + x_t from the left, output Re(c s_t)) and, bidirectional, the backward
// part (row H + h, the same from the right, output Re(c' s) with the state before x_t is
// added: lag 1, "exclusive"). Padded positions enter as 0 and their outputs are 0.
//
// The backward is the same machine run the other way. With g = dLoss/dy and u = x (both 0
// where padded), in a part's scan order n:
//   r_n = g_n + mu r_{n+1},   q_n = dr_n/dmu = r_{n+1} + mu q_{n+1}   (from the part's end)
//   inclusive part:  dL/dx_n = Re(c r_n),   sum_t g_t s_t = sum_n u_n r_n,
//                    sum_t g_t ds_t/dmu = sum_n u_n q_n;
//   exclusive part:  the same with (r_{n+1}, q_{n+1}), the state before g_n is added;
//   dL/dc = (Re, -Im) sum u r,   dL/dmu = (Re, -Im) c sum u q
// (y = Re F(mu, c) with F holomorphic: dy/dRe z = Re F', dy/dIm z = -Im F'). The identities:
// sum_t g_t s_t = sum_t g_t sum_{n<=t} mu^(t-n) u_n = sum_n u_n sum_{t>=n} mu^(t-n) g_t, and
// its derivative in mu; at lag 1 the same with t > n. So dL/dx and the parameter gradients
// come from one scan of (r, q) over dL/dy against the forward's direction, weighted by x: the
// forward states are never needed, and the backward reads dL/dy and x once each.
//
// The chunk algebra. A segment of n positions run from a zero state leaves (e, e') (state
// and mu-derivative). A segment that left (e, e') following one that left (s, s') gives
//   s -> mu^n s + e,    s' -> mu^n s' + n mu^(n-1) s + e'
// so besides the two results a composition needs only "step n" = (mu^n, n mu^(n-1)) of the
// later segment (computed by squaring the dual number (mu, 1)).
//
// One pass (ces_chunk_scan). A chunk is T = 8 kSeg positions, [k T, k T + T) in position
// order, of 32 adjacent channels of one sequence (kSeg = 24 in float32 and bfloat16, 12 in
// float64, two thirds of that in the bidirectional backward). Both directions use the same
// chunks; positions at or past L enter as 0 (a part run from the right meets them first and
// they leave its state 0; one run from the left meets them last, in the last chunk, whose
// aggregate nothing reads). A block of 256 threads takes a ticket from an atomic counter,
// chunk-major (all rows' first chunks, then their second ...), so every chunk a block waits
// for belongs to a block that started before it and never waits on it: the pass makes
// progress whatever the number of resident blocks. Warp w takes positions [w kSeg,
// (w+1) kSeg) of the chunk in the part's scan order and lane = channel, so each load and
// store of a warp is one row segment of 32 adjacent channels (128 B in float32).
//   1. Each thread loads its kSeg inputs (and, backward, weights) -- all loads issued before
//      any is used --, runs its segment from zero (the result goes to shared memory), and
//      stages the inputs in shared memory, so that they are not held in registers through
//      the look-back.
//   2. Warp 0 folds the 8 segment results into the chunk's aggregate and publishes it
//      (values; __threadfence; flag 1 with release order); the first chunk has no
//      predecessor and publishes nothing yet. It then looks back: lane l acquire-loads the
//      flag of predecessor (top - l), 32 flags a round trip, until the nearest inclusive
//      value (flag 2) has only published chunks after it; it folds that inclusive value
//      forward through those chunks' aggregates, in order. Every inclusive value is
//      therefore bitwise the sequential chain excl_k = fold(excl_{k-1}, A_{k-1}) (by
//      induction; the folds use explicit float64 fma), whatever the timing: the results are
//      deterministic. Warp 0 turns the incoming state into each warp's; warp 1 does the same
//      for the bidirectional backward part from the carries pass. After the barrier warp 0
//      publishes the chunk's inclusive value (flag 2), so that only it waits on that fence.
//   3. Each thread runs its segment again from its incoming state over the staged inputs
//      and writes its outputs once. The backward sums u r and u q per thread (products in
//      the arithmetic type, sums in float64), then per block in warp order into a compact
//      per-chunk buffer (each block writes only its own chunk's 32 channels); the last
//      block to finish a group of 16 chunks of a row (an acq_rel counter) sums them in chunk
//      order, and the last of those for a channel group sums the groups in (sequence, group)
//      order and writes dL/dmu and dL/dc: fixed order, deterministic, no extra launch.
// The carries pass (bidirectional only) is the same kernel for the backward part alone in
// its own direction: it writes each chunk's incoming state instead of outputs.
//
// Launches and bytes per element of [B, L, H] (s = element size: 4 float32, 2 bfloat16, 8
// float64). Each call also zeroes its flags and counters (at::zeros on the current stream:
// 4 B per chunk and row) and, per chunk and channel, writes a float64 aggregate and
// inclusive value (16 B each forward, 32 B backward) and 32 B per part of partial sums
// backward, each read about once: about 0.3 B (forward) and 0.9 B (backward) per element at
// T = 192, mostly served from L2, against the 8 and 12 B of the floor below.
//   causal forward          1 pass: reads x, writes y                  2 s  (the floor)
//   causal backward         1 pass: reads dy, x, writes dx             3 s  (the floor)
//   bidirectional forward   carries (reads x) + pass (x; y)            3 s  (floor 2 s)
//   bidirectional backward  carries (reads dy) + pass (dy, x; dx)      4 s  (floor 3 s)
// Why bandwidth should bound it: at B = 4, H = 512, L = 16K float32 a pass is 5504 blocks;
// a block has 24 KB (forward) or 48 KB (backward) of independent loads in flight, with 4
// (forward: 64 registers, 28 KB of shared memory) or 3 (backward: 80 registers, 56 KB)
// blocks per SM: 96-144 KB of loads in flight per SM against the ~32 KB that the copy rate
// per SM times the memory latency (~1 us) asks for; the serial part of a block (a 24-step
// segment scan twice, float64 folds, one or two L2 round trips of look-back, two fences) is
// a few microseconds. (ptxas, sm_90: the causal float32 kernels spill 24-32 B per thread at
// those register budgets.) Expected: each pass at 70-85% of the copy rate, fwd+bwd at
// L = 16K about 0.19-0.23 ms against a 0.158 ms floor at 4.25 TB/s, 64K about 0.75-0.90
// ms against 0.63. These are estimates from the byte counts and occupancy, not measurements;
// scripts/gpu-check.sh measures them (docs/CUDA.md).
//
// Arithmetic: float32 for float32 and bfloat16 x (bfloat16 read and written as such, each
// output rounded once), float64 for float64 x; segment and chunk compositions and the
// parameter gradients' sums in float64. The recurrence is stable for |mu| <= 1, so no
// overflow guard is needed. No host synchronisation, every launch checked; flags and
// counters are zeroed on the current stream, so the op can be captured in a CUDA graph.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda/atomic>
#include <torch/library.h>

#include <climits>
#include <cstdint>

#include "../ces_scan_internal.h"
#include "ops/dispatch.h"
#include "ops/low_precision.h"

namespace seqmix::ops {
namespace {

constexpr int kWarps = 8;                 // segments per chunk
constexpr int kLanes = 32;                // channels per block (one warp's width)
constexpr int kThreads = kWarps * kLanes;
constexpr int kFan = 16;                  // chunks per first-level group of partial sums

// Positions per thread (kSeg): 24 in float32 and bfloat16, 12 in float64 (so that the
// loads a thread keeps in flight fit its register budget), two thirds of that in the
// bidirectional backward, whose threads also hold the backward part's outputs in registers.
// T = 8 kSeg positions per chunk.
template <typename acc_t, bool kDeriv, bool kBidir>
constexpr int seg_len() {
  return (sizeof(acc_t) == 8 ? 12 : 24) * (kDeriv && kBidir ? 2 : 3) / 3;
}

// v, hidden from the optimiser: an offset stepped through `opaque` is computed step by step
// where it is used, not precomputed for every step and held in registers. (On an integer,
// not a pointer, so that loads through it stay global loads.)
__device__ __forceinline__ int64_t opaque(int64_t v) {
  asm volatile("" : "+l"(v));
  return v;
}

template <typename T>
struct Cx {
  T re, im;
};

template <typename T>
__device__ __forceinline__ Cx<T> cmul(Cx<T> a, Cx<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

// mu s + x for a real x: one step of the recurrence.
template <typename T>
__device__ __forceinline__ Cx<T> cstep(Cx<T> mu, Cx<T> s, T x) {
  return {mu.re * s.re - mu.im * s.im + x, mu.re * s.im + mu.im * s.re};
}

// mu d + s: one step of the state's mu-derivative (d_t = mu d_{t-1} + s_{t-1}).
template <typename T>
__device__ __forceinline__ Cx<T> dstep(Cx<T> mu, Cx<T> d, Cx<T> s) {
  return {mu.re * d.re - mu.im * d.im + s.re, mu.re * d.im + mu.im * d.re + s.im};
}

// a b + c in float64 with explicit fused multiply-adds, so that every fold rounds the same
// way wherever it is inlined (the look-back's determinism rests on it).
__device__ __forceinline__ Cx<double> cfma(Cx<double> a, Cx<double> b, Cx<double> c) {
  return {__fma_rn(a.re, b.re, __fma_rn(-a.im, b.im, c.re)),
          __fma_rn(a.re, b.im, __fma_rn(a.im, b.re, c.im))};
}

// The state of a part at a chunk or segment boundary: s, and with kDeriv its mu-derivative.
template <bool kDeriv>
struct alignas(16) Carry {
  Cx<double> s;
};
template <>
struct alignas(16) Carry<true> {
  Cx<double> s, d;
};

// (mu^n, n mu^(n-1)): the zero-input step over n positions and its mu-derivative.
struct Step {
  Cx<double> p, dp;
};

__device__ __forceinline__ Step step_mul(Step a, Step b) {
  return {cmul(a.p, b.p), cfma(a.dp, b.p, cmul(a.p, b.dp))};
}

// Step over n positions, by squaring the dual number (mu, 1).
__device__ __forceinline__ Step step_pow(Cx<double> mu, int n) {
  Step r{{1, 0}, {0, 0}}, base{mu, {1, 0}};
  while (n > 0) {
    if (n & 1) r = step_mul(r, base);
    base = step_mul(base, base);
    n >>= 1;
  }
  return r;
}

// A segment that left `a` from a zero state, following one that left `x`.
template <bool kDeriv>
__device__ __forceinline__ Carry<kDeriv> fold(const Carry<kDeriv>& x, const Carry<kDeriv>& a,
                                              const Step& st) {
  Carry<kDeriv> r;
  r.s = cfma(st.p, x.s, a.s);
  if constexpr (kDeriv) r.d = cfma(st.p, x.d, cfma(st.dp, x.s, a.d));
  return r;
}

template <bool kDeriv>
__device__ __forceinline__ Carry<kDeriv> zero_carry() {
  Carry<kDeriv> r;
  r.s = {0, 0};
  if constexpr (kDeriv) r.d = {0, 0};
  return r;
}

// A carry published by another block: read from L2 (never a stale L1 line).
template <bool kDeriv>
__device__ __forceinline__ Carry<kDeriv> load_published(const Carry<kDeriv>* p) {
  const auto* q = reinterpret_cast<const double2*>(p);
  Carry<kDeriv> r;
  const double2 s = __ldcg(q);
  r.s = {s.x, s.y};
  if constexpr (kDeriv) {
    const double2 d = __ldcg(q + 1);
    r.d = {d.x, d.y};
  }
  return r;
}

template <typename T>
__device__ __forceinline__ Carry<true> to_carry(Cx<T> s, Cx<T> d) {
  return {{double(s.re), double(s.im)}, {double(d.re), double(d.im)}};
}
template <typename T>
__device__ __forceinline__ Carry<false> to_carry(Cx<T> s) {
  return {{double(s.re), double(s.im)}};
}

__device__ __forceinline__ int load_acquire(const int* p) {
  return cuda::atomic_ref<int, cuda::thread_scope_device>(*const_cast<int*>(p))
      .load(cuda::memory_order_acquire);
}
__device__ __forceinline__ void store_release(int* p, int v) {
  cuda::atomic_ref<int, cuda::thread_scope_device>(*p).store(v, cuda::memory_order_release);
}
__device__ __forceinline__ int fetch_add_acq_rel(int* p, int v) {
  return cuda::atomic_ref<int, cuda::thread_scope_device>(*p).fetch_add(
      v, cuda::memory_order_acq_rel);
}

// Look-back flags.
constexpr int kNothing = 0, kAggregate = 1, kInclusive = 2;

// Warp-wide (all 32 lanes): lane `lane` stores its carry at vals[at * 32 + lane], then flag
// `flag` is released for chunk `at`.
template <bool kDeriv>
__device__ __forceinline__ void publish(Carry<kDeriv>* vals, int* status, int64_t at, int lane,
                                        const Carry<kDeriv>& v, int flag) {
  vals[at * kLanes + lane] = v;
  __threadfence();
  __syncwarp();
  if (lane == 0) store_release(status + at, flag);
}

// Warp-wide look-back of chunk `kscan` > 0 of a row whose flags start at `status`: returns
// the scan index j of the nearest predecessor with an inclusive value such that every chunk
// between j and kscan has published its aggregate. Lane l reads the flag of predecessor
// (top - l), 32 per round trip, each with an acquire load; the closing __syncwarp orders every
// lane's later reads of the published values after all of them. Chunk 0 only ever publishes
// an inclusive value, so the walk ends there at the latest (lanes before chunk 0 read as
// aggregates and are never reached).
__device__ __forceinline__ int look_back(const int* status, int kscan, int lane) {
  for (int top = kscan - 1;; top -= kLanes) {
    const int j = top - lane;
    for (;;) {
      const int f = j >= 0 ? load_acquire(status + j) : kAggregate;
      const unsigned incl = __ballot_sync(0xffffffffu, f == kInclusive);
      const unsigned none = __ballot_sync(0xffffffffu, f == kNothing);
      const unsigned nearer = incl ? (incl & (0u - incl)) - 1u : 0xffffffffu;
      if ((none & nearer) == 0) {
        if (incl) {
          __syncwarp();
          return top - (__ffs(static_cast<int>(incl)) - 1);
        }
        break;  // 32 aggregates: the next window
      }
      __nanosleep(64);
    }
  }
}

template <typename scalar_t, typename acc_t>
struct ScanArgs {
  const scalar_t* in;  // [B, L, H] the recurrence's input: x (forward) or dLoss/dy (backward)
  const scalar_t* w;   // [B, L, H] the weights of the parameter-gradient sums: x (backward)
  const bool* mask;    // [B, L] or null
  const acc_t* mu;     // [C, 2]
  const acc_t* c;      // [C, 2]
  scalar_t* out;       // [B, L, H] y (forward) or dLoss/dx (backward)
  int* status;         // [rows, K] look-back flags, zeroed
  int* ticket;         // [1] zeroed
  int* count1;         // [rows, K1] first-level partial-sum counters, zeroed
  int* count2;         // [groups] second-level counters, zeroed
  void* agg;           // [rows, K, 32] Carry: chunk aggregates (by scan index)
  void* incl;          // [rows, K, 32] Carry: inclusive values (by scan index)
  void* carries;       // [rows, K, 32] Carry: the backward part's incoming states (by chunk)
  double* part1;       // [rows, K, 32, 4 P] per-chunk sums: u r (re, im), u q (re, im) per part
  double* part2;       // [rows, K1, 32, 4 P] per-group sums
  acc_t* grad_mu;      // [C, 2]
  acc_t* grad_c;       // [C, 2]
  int B, L, H, K, K1;  // K = chunks per row, K1 = groups of kFan chunks per row
  int groups, rows;    // channel groups of 32; rows = B groups
  bool reverse;        // the main part runs from the right
  int main_row;        // parameter rows of the main part (0, or H in the carries pass)
  int sec_row;         // parameter rows of the bidirectional backward part (H)
};

template <typename acc_t>
__device__ __forceinline__ Cx<acc_t> load_cx(const acc_t* p, int row) {
  return {p[2 * row], p[2 * row + 1]};
}

// Staged inputs per warp in the values pass: x (and, backward, the weights), kSeg rows of 32
// lanes each, in dynamic shared memory; the backward's per-warp sums reuse its own region.
template <typename acc_t, int kSeg, bool kDeriv, bool kCarriesOnly>
constexpr int stage_arrays() {
  return kCarriesOnly ? 0 : (kDeriv ? 2 : 1);
}
template <typename acc_t, int kSeg, bool kDeriv, bool kCarriesOnly>
constexpr int stage_bytes() {
  return kWarps * stage_arrays<acc_t, kSeg, kDeriv, kCarriesOnly>() * kSeg * kLanes *
         static_cast<int>(sizeof(acc_t));
}

// Blocks per SM the register budget is set for (__launch_bounds__): 4 (64 registers) where a
// thread stages one array, 3 (80 registers; 56 KB of shared memory each in float32) for the
// backward.
template <bool kDeriv, bool kCarriesOnly>
constexpr int min_blocks() {
  return kDeriv && !kCarriesOnly ? 3 : 4;
}

// One pass; see the file comment. kDeriv: the backward (carries r and q, weights w, parameter
// gradients). kBidir: the main part is joined by the backward part, run the other way at lag
// 1 from the carries pass's incoming states. kCarriesOnly: the carries pass (writes
// `carries`, no outputs).
template <typename scalar_t, typename acc_t, int kSeg, bool kDeriv, bool kBidir,
          bool kCarriesOnly>
__global__ void __launch_bounds__(kThreads, min_blocks<kDeriv, kCarriesOnly>())
    ces_chunk_scan(ScanArgs<scalar_t, acc_t> a) {
  static_assert(kSeg <= 32, "validity bits are one 32-bit word per thread");
  constexpr int T = kWarps * kSeg;
  constexpr int P = kBidir ? 2 : 1;
  constexpr int kSums = 4 * P;  // per lane: u r (re, im), u q (re, im) for each part
  constexpr bool kTwo = kBidir && !kCarriesOnly;      // the backward part runs in this pass
  constexpr bool kWeights = kDeriv && !kCarriesOnly;  // w is read (the parameter sums)
  constexpr int kArrays = stage_arrays<acc_t, kSeg, kDeriv, kCarriesOnly>();
  static_assert(!kWeights || kArrays * kSeg * sizeof(acc_t) >= kSums * sizeof(double),
                "a warp's sums fit in its staging region");
  using C = Carry<kDeriv>;
  // Segment results, then (after the look-back) each segment's incoming state.
  __shared__ C seg[kWarps][kLanes];
  __shared__ C seg2[kTwo ? kWarps : 1][kLanes];
  __shared__ int s_ticket, s_last;
  extern __shared__ __align__(16) unsigned char stage_raw[];

  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  if (threadIdx.x == 0) s_ticket = atomicAdd(a.ticket, 1);
  __syncthreads();
  // Indices in 32 bits (the host checks that they fit); element offsets in 64.
  const int kscan = s_ticket / a.rows;  // chunk index in the main part's scan order
  const int row = s_ticket % a.rows;
  const int b = row / a.groups, group = row % a.groups;
  const int h = group * kLanes + lane;
  const bool live = h < a.H;
  const int k = a.reverse ? a.K - 1 - kscan : kscan;  // chunk index in positions
  const int base = row * a.K;  // this row's flags, published values and carries
  // This warp's staging region: [kArrays][kSeg][kLanes].
  acc_t* stage = reinterpret_cast<acc_t*>(stage_raw) + warp * (kArrays * kSeg * kLanes);

  // 1. Inputs (0 where padded or past L); segment results from zero; inputs staged.
  // The thread's positions: t0 + j dir, j = 0 .. kSeg - 1, in the main part's scan order.
  // Rows are walked with running offsets (kept opaque, so that the compiler steps them
  // instead of holding kSeg 64-bit offsets); the mask is applied after the loads, so that
  // none waits for another.
  const int dir = a.reverse ? -1 : 1;
  const int t0 = a.reverse ? k * T + (T - 1 - warp * kSeg) : k * T + warp * kSeg;
  const int64_t at0 = (int64_t(b) * a.L + t0) * a.H + h;  // element offsets
  const int64_t stride = dir * int64_t(a.H);
  // Bit j: position t0 + j dir in [0, L) (of a live channel). Running from the left the
  // positions past L are the last ones, from the right the first ones.
  constexpr uint32_t kFull = kSeg == 32 ? 0xffffffffu : (1u << kSeg) - 1u;
  uint32_t inside = 0;
  if (live) {
    const int n = a.reverse ? t0 - a.L + 1 : a.L - t0;  // positions skipped / in range
    if (a.reverse)
      inside = n <= 0 ? kFull : n >= kSeg ? 0u : kFull & (kFull << n);
    else
      inside = n >= kSeg ? kFull : n <= 0 ? 0u : (1u << n) - 1u;
  }
  uint32_t valid = inside;  // and not padded
  const Cx<acc_t> mu = live ? load_cx(a.mu, a.main_row + h) : Cx<acc_t>{0, 0};
  const Cx<acc_t> mu2 = kTwo && live ? load_cx(a.mu, a.sec_row + h) : Cx<acc_t>{0, 0};
  {
    acc_t xin[kSeg];
    acc_t win[kWeights ? kSeg : 1];
    int64_t at = at0;
#pragma unroll
    for (int j = 0; j < kSeg; ++j) {
      const bool ok = inside >> j & 1u;
      xin[j] = ok ? static_cast<acc_t>(a.in[at]) : acc_t(0);
      if constexpr (kWeights) win[j] = ok ? static_cast<acc_t>(a.w[at]) : acc_t(0);
      at = opaque(at + stride);
    }
    if (a.mask != nullptr) {
      int64_t m = int64_t(b) * a.L + t0;
#pragma unroll
      for (int j = 0; j < kSeg; ++j) {
        if ((inside >> j & 1u) && !a.mask[m]) valid &= ~(1u << j);
        m = opaque(m + dir);
      }
#pragma unroll
      for (int j = 0; j < kSeg; ++j) {
        if (!(valid >> j & 1u)) {
          xin[j] = 0;
          if constexpr (kWeights) win[j] = 0;
        }
      }
    }
    Cx<acc_t> s{0, 0}, d{0, 0};
#pragma unroll
    for (int j = 0; j < kSeg; ++j) {
      if constexpr (kDeriv) d = dstep(mu, d, s);
      s = cstep(mu, s, xin[j]);
    }
    if constexpr (kDeriv)
      seg[warp][lane] = to_carry(s, d);
    else
      seg[warp][lane] = to_carry(s);
    if constexpr (kTwo) {  // the backward part, against the main part's order
      Cx<acc_t> s2{0, 0}, d2{0, 0};
#pragma unroll
      for (int j = kSeg - 1; j >= 0; --j) {
        if constexpr (kDeriv) d2 = dstep(mu2, d2, s2);
        s2 = cstep(mu2, s2, xin[j]);
      }
      if constexpr (kDeriv)
        seg2[warp][lane] = to_carry(s2, d2);
      else
        seg2[warp][lane] = to_carry(s2);
    }
    if constexpr (!kCarriesOnly) {
#pragma unroll
      for (int j = 0; j < kSeg; ++j) {
        stage[j * kLanes + lane] = xin[j];
        if constexpr (kWeights) stage[(kSeg + j) * kLanes + lane] = win[j];
      }
    }
  }
  __syncthreads();

  // 2. Warp 0: the chunk's aggregate, its publication, the look-back, incoming states.
  C* const agg = static_cast<C*>(a.agg);
  C* const incl = static_cast<C*>(a.incl);
  C total = zero_carry<kDeriv>(), excl = zero_carry<kDeriv>();
  Step step_chunk{};
  if (warp == 0) {
    const Cx<double> mud{double(mu.re), double(mu.im)};
    const Step step_seg = step_pow(mud, kSeg);
    step_chunk = step_pow(mud, T);
    total = seg[0][lane];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) total = fold(total, seg[w][lane], step_seg);
    if (kscan > 0) {
      if (kscan + 1 < a.K) publish(agg, a.status, base + kscan, lane, total, kAggregate);
      const int j = look_back(a.status + base, kscan, lane);
      excl = load_published(incl + int64_t(base + j) * kLanes + lane);
      for (int i = j + 1; i < kscan; ++i)
        excl = fold(excl, load_published(agg + int64_t(base + i) * kLanes + lane), step_chunk);
    }
    if constexpr (kCarriesOnly) {
      static_cast<C*>(a.carries)[int64_t(base + k) * kLanes + lane] = excl;
    } else {
      C st = excl;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const C e = seg[w][lane];
        seg[w][lane] = st;
        st = fold(st, e, step_seg);
      }
    }
  }
  // Warp 1, meanwhile: the backward part's incoming states, from the chunk's far end in its
  // own order (warp 7 first).
  if constexpr (kTwo) {
    if (warp == 1) {
      const Step step_seg = step_pow(Cx<double>{double(mu2.re), double(mu2.im)}, kSeg);
      C st = static_cast<const C*>(a.carries)[int64_t(base + k) * kLanes + lane];
#pragma unroll
      for (int w = kWarps - 1; w >= 0; --w) {
        const C e = seg2[w][lane];
        seg2[w][lane] = st;
        st = fold(st, e, step_seg);
      }
    }
  }
  if constexpr (!kCarriesOnly) __syncthreads();
  // The inclusive value (needed by later chunks only): published after the barrier, so that
  // its fence stalls warp 0 alone.
  if (warp == 0 && kscan + 1 < a.K)
    publish(incl, a.status, base + kscan, lane, fold(excl, total, step_chunk), kInclusive);

  // 3. Outputs (and the backward's sums) from each segment's incoming state.
  if constexpr (!kCarriesOnly) {
    const Cx<acc_t> cc = live ? load_cx(a.c, a.main_row + h) : Cx<acc_t>{0, 0};
    double sum[kWeights ? kSums : 1];
#pragma unroll
    for (int q = 0; q < (kWeights ? kSums : 1); ++q) sum[q] = 0;
    acc_t y2[kTwo ? kSeg : 1];
    if constexpr (kTwo) {  // the backward part, at lag 1, against the main part's order
      const Cx<acc_t> c2 = live ? load_cx(a.c, a.sec_row + h) : Cx<acc_t>{0, 0};
      const C in = seg2[warp][lane];
      Cx<acc_t> s{acc_t(in.s.re), acc_t(in.s.im)}, d{0, 0};
      if constexpr (kDeriv) d = {acc_t(in.d.re), acc_t(in.d.im)};
#pragma unroll
      for (int j = kSeg - 1; j >= 0; --j) {
        y2[j] = c2.re * s.re - c2.im * s.im;
        if constexpr (kDeriv) {
          const acc_t u = stage[(kSeg + j) * kLanes + lane];
          sum[4] += double(u * s.re);
          sum[5] += double(u * s.im);
          sum[6] += double(u * d.re);
          sum[7] += double(u * d.im);
          d = dstep(mu2, d, s);
        }
        s = cstep(mu2, s, stage[j * kLanes + lane]);
      }
    }
    {  // the main part, inclusive
      int64_t at = at0;
      const C in = seg[warp][lane];
      Cx<acc_t> s{acc_t(in.s.re), acc_t(in.s.im)}, d{0, 0};
      if constexpr (kDeriv) d = {acc_t(in.d.re), acc_t(in.d.im)};
#pragma unroll
      for (int j = 0; j < kSeg; ++j) {
        if constexpr (kDeriv) d = dstep(mu, d, s);
        s = cstep(mu, s, stage[j * kLanes + lane]);
        acc_t y = cc.re * s.re - cc.im * s.im;
        if constexpr (kTwo) y += y2[j];
        if constexpr (kDeriv) {
          const acc_t u = stage[(kSeg + j) * kLanes + lane];
          sum[0] += double(u * s.re);
          sum[1] += double(u * s.im);
          sum[2] += double(u * d.re);
          sum[3] += double(u * d.im);
        }
        if (inside >> j & 1u) a.out[at] = static_cast<scalar_t>((valid >> j & 1u) ? y : acc_t(0));
        at = opaque(at + stride);
      }
    }
    if constexpr (kDeriv) {
      // Block sums in warp order, then the two-level fixed-order reduction over chunks and
      // sequences (the file comment). A warp's sums go into its own staging region, once all
      // its lanes are past their last read of it.
      __syncwarp();
      double* wsum = reinterpret_cast<double*>(stage);  // [kLanes][kSums]
#pragma unroll
      for (int q = 0; q < kSums; ++q) wsum[lane * kSums + q] = sum[q];
      __syncthreads();
      constexpr int kComp = kLanes * kSums;  // doubles per chunk (or group) entry
      constexpr int kWarpStride = kArrays * kSeg * kLanes * int(sizeof(acc_t)) / 8;  // doubles
      const double* all = reinterpret_cast<const double*>(stage_raw);
      if (warp == 0) {
        double* dst = a.part1 + (int64_t(base + k) * kLanes + lane) * kSums;
#pragma unroll
        for (int q = 0; q < kSums; ++q) {
          double acc = all[lane * kSums + q];
#pragma unroll
          for (int w = 1; w < kWarps; ++w) acc += all[w * kWarpStride + lane * kSums + q];
          dst[q] = acc;
        }
        __threadfence();
      }
      __syncthreads();
      const int k1 = k / kFan;
      const int first = k1 * kFan;
      const int n1 = a.K - first < kFan ? a.K - first : kFan;
      if (threadIdx.x == 0)
        s_last = fetch_add_acq_rel(a.count1 + int64_t(row) * a.K1 + k1, 1) == n1 - 1;
      __syncthreads();
      if (!s_last) return;
      // The last block of this group of chunks: their sums in chunk order.
      __threadfence();
      for (int comp = threadIdx.x; comp < kComp; comp += kThreads) {
        const double* src = a.part1 + int64_t(base + first) * kComp + comp;
        double acc = 0;
#pragma unroll
        for (int n = 0; n < kFan; ++n)
          if (n < n1) acc += __ldcg(src + int64_t(n) * kComp);
        a.part2[(int64_t(row) * a.K1 + k1) * kComp + comp] = acc;
      }
      __threadfence();
      __syncthreads();
      const int n2 = a.B * a.K1;
      if (threadIdx.x == 0) s_last = fetch_add_acq_rel(a.count2 + group, 1) == n2 - 1;
      __syncthreads();
      if (!s_last) return;
      // The last block of this channel group: the sums over (sequence, group) in order.
      __threadfence();
      double* red = reinterpret_cast<double*>(stage_raw);  // kComp doubles, free again
      for (int comp = threadIdx.x; comp < kComp; comp += kThreads) {
        double acc = 0;
        for (int bb = 0; bb < a.B; ++bb) {
          const double* src = a.part2 + (int64_t(bb) * a.groups + group) * a.K1 * kComp + comp;
#pragma unroll 8
          for (int n = 0; n < a.K1; ++n) acc += __ldcg(src + int64_t(n) * kComp);
        }
        red[comp] = acc;
      }
      __syncthreads();
      if (threadIdx.x < kLanes * P) {
        const int l = threadIdx.x % kLanes, p = threadIdx.x / kLanes;
        const int hh = group * kLanes + l;
        if (hh < a.H) {
          const int prow = (p == 0 ? a.main_row : a.sec_row) + hh;
          const double* r = red + l * kSums + 4 * p;
          const double cr = a.c[2 * prow], ci = a.c[2 * prow + 1];
          // dL/dc = (Re, -Im) sum u r;  dL/dmu = (Re, -Im) c sum u q.
          a.grad_c[2 * prow] = static_cast<acc_t>(r[0]);
          a.grad_c[2 * prow + 1] = static_cast<acc_t>(-r[1]);
          a.grad_mu[2 * prow] = static_cast<acc_t>(cr * r[2] - ci * r[3]);
          a.grad_mu[2 * prow + 1] = static_cast<acc_t>(-(cr * r[3] + ci * r[2]));
        }
      }
    }
  }
}

// ---- Host side ----

// The chunking of one call and its scratch: flags and counters (one zeroed int32 buffer, so
// one memset), published carries, and the backward's partial sums.
template <typename scalar_t, typename acc_t, bool kDeriv, bool kBidir>
struct Plan {
  static constexpr int kSeg = seg_len<acc_t, kDeriv, kBidir>();
  static constexpr int T = kWarps * kSeg;
  using C = Carry<kDeriv>;

  ScanArgs<scalar_t, acc_t> args{};
  at::Tensor ints, agg, incl, carries, part1, part2;
  int64_t flags_per_pass = 0;

  Plan(const at::Tensor& in, const at::Tensor& mu, const at::Tensor& c, const at::Tensor& mask) {
    auto& s = args;
    s.in = in.data_ptr<scalar_t>();
    s.mask = mask.defined() ? mask.data_ptr<bool>() : nullptr;
    s.mu = mu.data_ptr<acc_t>();
    s.c = c.data_ptr<acc_t>();
    const int64_t B = in.size(0), L = in.size(1), H = in.size(2);
    const int64_t K = (L + T - 1) / T, K1 = (K + kFan - 1) / kFan;
    const int64_t groups = (H + kLanes - 1) / kLanes, rows = B * groups;
    // The kernels index positions, channels, parameter rows and chunks in 32 bits.
    TORCH_CHECK(L <= INT_MAX - T && 2 * H <= INT_MAX - kLanes && rows * K <= INT_MAX,
                "ces_scan: too large for one launch (B ", B, ", L ", L, ", H ", H, ")");
    s.B = static_cast<int>(B);
    s.L = static_cast<int>(L);
    s.H = static_cast<int>(H);
    s.K = static_cast<int>(K);
    s.K1 = static_cast<int>(K1);
    s.groups = static_cast<int>(groups);
    s.rows = static_cast<int>(rows);
    s.sec_row = s.H;
    // Per pass: status [rows K], ticket [1], count1 [rows K1], count2 [groups].
    flags_per_pass = rows * K + 1 + rows * K1 + groups;
    const int passes = kBidir ? 2 : 1;
    ints = at::zeros({passes * flags_per_pass}, in.options().dtype(at::kInt));
    const auto bytes = in.options().dtype(at::kByte);
    const int64_t carry_bytes = rows * K * kLanes * static_cast<int64_t>(sizeof(C));
    agg = at::empty({carry_bytes}, bytes);
    incl = at::empty({carry_bytes}, bytes);
    s.agg = agg.data_ptr();
    s.incl = incl.data_ptr();
    if (kBidir) {
      carries = at::empty({carry_bytes}, bytes);
      s.carries = carries.data_ptr();
    }
    if (kDeriv) {
      const int64_t comp = kLanes * 4 * (kBidir ? 2 : 1);
      const auto dbl = in.options().dtype(at::kDouble);
      part1 = at::empty({rows * K * comp}, dbl);
      part2 = at::empty({rows * K1 * comp}, dbl);
      s.part1 = part1.data_ptr<double>();
      s.part2 = part2.data_ptr<double>();
    }
  }

  // Points the args at pass `pass`'s flags and counters.
  ScanArgs<scalar_t, acc_t> pass_args(int pass) const {
    ScanArgs<scalar_t, acc_t> s = args;
    int* base = ints.data_ptr<int>() + pass * flags_per_pass;
    s.status = base;
    s.ticket = base + s.rows * s.K;
    s.count1 = s.ticket + 1;
    s.count2 = s.count1 + s.rows * s.K1;
    return s;
  }

  template <bool kCarriesOnly>
  void launch(const ScanArgs<scalar_t, acc_t>& s) const {
    const auto kernel = ces_chunk_scan<scalar_t, acc_t, kSeg, kDeriv, kBidir, kCarriesOnly>;
    constexpr int smem = stage_bytes<acc_t, kSeg, kDeriv, kCarriesOnly>();
    // Above 48 KB of dynamic shared memory a kernel must opt in (per device: set each time;
    // a host-side attribute, no stream work).
    if (smem > 48 * 1024)
      C10_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const auto blocks = static_cast<unsigned>(s.rows * s.K);
    kernel<<<blocks, kThreads, smem, at::cuda::getCurrentCUDAStream()>>>(s);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // The bidirectional form: the carries pass of the backward part (rows H + h, run against
  // `main_reverse`), then the pass with both parts.
  void run(bool main_reverse) {
    if (kBidir) {
      auto s = pass_args(1);
      s.reverse = !main_reverse;
      s.main_row = s.H;
      launch<true>(s);
    }
    auto s = pass_args(0);
    s.reverse = main_reverse;
    s.main_row = 0;
    launch<false>(s);
  }
};

template <typename F>
void dispatch(const at::Tensor& x, F&& f) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return f(float{}, float{});
    case at::kDouble:
      return f(double{}, double{});
    case at::kBFloat16:
      return f(at::BFloat16{}, float{});
    default:
      TORCH_CHECK(false, "ces_scan: unexpected dtype ", x.scalar_type());
  }
}

// The op's arguments, checked, as the kernels take them: x and the mask contiguous, the
// coefficients widened to the arithmetic type (float32 for bfloat16 x).
struct Inputs {
  Direction dir;
  at::Tensor x, mu, c, mask;
};

Inputs inputs(const char* fn, const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
              const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const at::Tensor mask = detail::or_undefined(mask_opt);
  const Direction dir = detail::direction_arg(fn, direction);
  ces_check_scan(fn, x, mu, c, mask, dir);
  return {dir, x.contiguous(), detail::widen(mu).contiguous(), detail::widen(c).contiguous(),
          mask.defined() ? mask.contiguous() : mask};
}

at::Tensor ces_scan_cuda(const at::Tensor& x_in, const at::Tensor& mu_in, const at::Tensor& c_in,
                         const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Inputs in = inputs("ces_scan", x_in, mu_in, c_in, mask_opt, direction);
  const at::Tensor &x = in.x, &mu = in.mu, &c = in.c, &mask = in.mask;
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  dispatch(x, [&](auto s_tag, auto a_tag) {
    using scalar_t = decltype(s_tag);
    using acc_t = decltype(a_tag);
    auto go = [&](auto plan) {
      plan.args.out = y.data_ptr<scalar_t>();
      plan.run(/*main_reverse=*/false);
    };
    if (in.dir == Direction::bidirectional)
      go(Plan<scalar_t, acc_t, false, true>(x, mu, c, mask));
    else
      go(Plan<scalar_t, acc_t, false, false>(x, mu, c, mask));
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ces_scan_backward_cuda(
    const at::Tensor& grad, const at::Tensor& x_in, const at::Tensor& mu_in, const at::Tensor& c_in,
    const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Inputs in = inputs("_ces_scan_backward", x_in, mu_in, c_in, mask_opt, direction);
  const at::Tensor &x = in.x, &mu = in.mu, &c = in.c, &mask = in.mask;
  const at::Tensor g = grad.to(x.scalar_type()).contiguous();
  at::Tensor gx = at::empty_like(x);
  if (x.numel() == 0) return {gx.zero_(), at::zeros_like(mu_in), at::zeros_like(c_in)};
  // Every row of both is written by the last block of its channel group.
  at::Tensor gmu = at::empty_like(mu), gc = at::empty_like(c);
  dispatch(x, [&](auto s_tag, auto a_tag) {
    using scalar_t = decltype(s_tag);
    using acc_t = decltype(a_tag);
    // The transposed parts: the recurrence over dL/dy against the forward's direction,
    // weighted by x.
    auto go = [&](auto plan) {
      plan.args.in = g.data_ptr<scalar_t>();
      plan.args.w = x.data_ptr<scalar_t>();
      plan.args.out = gx.data_ptr<scalar_t>();
      plan.args.grad_mu = gmu.data_ptr<acc_t>();
      plan.args.grad_c = gc.data_ptr<acc_t>();
      plan.run(/*main_reverse=*/true);
    };
    if (in.dir == Direction::bidirectional)
      go(Plan<scalar_t, acc_t, true, true>(g, mu, c, mask));
    else
      go(Plan<scalar_t, acc_t, true, false>(g, mu, c, mask));
  });
  return {gx, gmu.to(mu_in.scalar_type()), gc.to(c_in.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(seqmix, CUDA, m) {
  m.impl("ces_scan", &ces_scan_cuda);
  m.impl("_ces_scan_backward", &ces_scan_backward_cuda);
}

}  // namespace seqmix::ops
