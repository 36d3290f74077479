// Implementation of the fused AIB scan kernels, compiled once per instruction set: the
// including file defines SEQMIX_ISA (a namespace name) and is built with that ISA's flags.
// Plain C++ with GCC vector extensions (one 64-byte vector = one channel block), so the same
// source becomes AVX-512 or SSE2 code. No LibTorch headers: this file compiles in a second.
#include <algorithm>
#include <type_traits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <immintrin.h>

#include "aib_scan_kernel.h"
#include "ops/cpu/vec_math_impl.h"

#ifndef SEQMIX_ISA
#error "define SEQMIX_ISA before including aib_scan_kernel_impl.h"
#endif

namespace seqmix::ops::cpu::SEQMIX_ISA {

// Exponent of "nothing here": far below any real exponent (|A log2 e| is clamped to 2^20),
// far enough from the integer limit that adding K level exponents cannot wrap.
constexpr int64_t kSentinel = -(int64_t{1} << 28);

// Exponent arithmetic that wraps instead of overflowing: a NaN or infinite input (a diverged
// model) converts to INT_MIN exponents, whose sums are garbage either way but must not be
// undefined behaviour (found by the sanitizer build on a run with train.lr = 1e30).
template <typename T>
inline I<T> wrap_add(I<T> a, I<T> b) {
  using E = std::make_unsigned_t<std::remove_cv_t<std::remove_reference_t<decltype(a[0])>>>;
  typedef E U __attribute__((vector_size(sizeof(I<T>))));
  return (I<T>)((U)a + (U)b);
}
template <typename T>
inline I<T> wrap_sub(I<T> a, I<T> b) {
  using E = std::make_unsigned_t<std::remove_cv_t<std::remove_reference_t<decltype(a[0])>>>;
  typedef E U __attribute__((vector_size(sizeof(I<T>))));
  return (I<T>)((U)a - (U)b);
}

// x_a <- x_a + W * x_b with W = wm * 2^we, all in the shared-exponent representation.
template <typename T>
inline void combine(V<T>& ha, V<T>& ua, I<T>& ea, V<T> hb, V<T> ub, I<T> eb, V<T> wm, I<T> we) {
  const I<T> eb2 = wrap_add<T>(eb, we);
  const I<T> e = ea > eb2 ? ea : eb2;
  const V<T> fa = pow2_nonpos<T>(wrap_sub<T>(ea, e));
  const V<T> fb = pow2_nonpos<T>(wrap_sub<T>(eb2, e)) * wm;
  ha = ha * fa + hb * fb;
  ua = ua * fa + ub * fb;
  ea = e;
}

// One [L][N] block of running sums (h = sum a_d E V, u = sum a_d E) * 2^e in the scratch
// buffer; block j of the backward pass holds the state before level j.
template <typename T>
struct Block {
  V<T>* h;
  V<T>* u;
  I<T>* e;
};

template <typename T>
inline Block<T> block_at(void* base, int64_t index, int64_t L) {
  auto* v = static_cast<V<T>*>(base) + index * 3 * L;
  return {v, v + L, reinterpret_cast<I<T>*>(v + 2 * L)};
}

template <typename T>
void load_level0(const AIBScanParams<T>& p, Block<T> x) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t L = p.L;
  for (int64_t q = 0; q < L; ++q) {
    const int64_t off = q * N;
    if (p.mask && !p.mask[q]) {
      x.h[q] = V<T>{};
      x.u[q] = V<T>{};
      x.e[q] = isplat<T>(kSentinel);
      continue;
    }
    V<T> m;
    I<T> k;
    exp_split<T>(load(p.a + off, N), m, k);
    x.h[q] = m * load(p.v + off, N);
    x.u[q] = m;
    x.e[q] = k;
  }
}

template <typename T>
void level_weight(const AIBScanParams<T>& p, int64_t j, V<T>& wm, I<T>& we) {
  exp_split<T>(load(p.lw + j * Traits<T>::N, Traits<T>::N), wm, we);
}

// Levels with a shift of at most kTile positions run tile by tile: every such level is
// applied to one kTile-position tile while it is in L1, reading the previous tile's last 2^j
// level-j values from a halo. Only the levels with longer shifts stream the whole block
// through L2 once each. Level j of the tiled group is exact because a tile's positions only
// read positions 2^j <= kTile earlier, which are either in the tile (still at level j, as
// the pass runs backwards) or in the halo saved before the previous tile advanced.
constexpr int64_t kTileBits = 7;
constexpr int64_t kTile = int64_t{1} << kTileBits;
constexpr int64_t kTiledLevels = kTileBits + 1;  // shifts 1 .. kTile
constexpr int64_t kHaloCap = int64_t{1} << kTiledLevels;
static_assert(kHaloCap == aib_halo_positions(), "scratch sizing assumes this halo");

template <typename T>
inline void copy_slots(Block<T> dst, int64_t d0, Block<T> src, int64_t s0, int64_t n) {
  std::memcpy(dst.h + d0, src.h + s0, sizeof(V<T>) * static_cast<size_t>(n));
  std::memcpy(dst.u + d0, src.u + s0, sizeof(V<T>) * static_cast<size_t>(n));
  std::memcpy(dst.e + d0, src.e + s0, sizeof(I<T>) * static_cast<size_t>(n));
}

// The exponent path for one staged block: a dense [1, L, N] problem (row stride N, mask and
// log weights staged alike; see forward_items).
template <typename T>
void forward_block_exact(const AIBScanParams<T>& p, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t L = p.L;
  const int64_t tiled = std::min<int64_t>(p.K, kTiledLevels);
  V<T> wm[64];
  I<T> we[64];
  Block<T> x = block_at<T>(scratch, 0, L);
  // Two halo regions (this tile's and the next one's), level j at offset 2^j - 1.
  auto* halo_base = static_cast<V<T>*>(scratch) + 3 * L;
  Block<T> halo[2] = {block_at<T>(halo_base, 0, kHaloCap), block_at<T>(halo_base, 1, kHaloCap)};
  load_level0(p, x);
  for (int64_t j = 0; j < p.K; ++j) level_weight(p, j, wm[j], we[j]);
  int cur = 0;
  for (int64_t t0 = 0; t0 < L; t0 += kTile) {
    const int64_t t1 = std::min(L, t0 + kTile);
    for (int64_t j = 0; j < tiled; ++j) {
      const int64_t s = int64_t{1} << j, off = s - 1;
      if (t1 < L) copy_slots(halo[1 - cur], off, x, t1 - s, s);  // for the next tile
      for (int64_t q = t1 - 1; q >= std::max(t0 + s, s); --q)
        combine<T>(x.h[q], x.u[q], x.e[q], x.h[q - s], x.u[q - s], x.e[q - s], wm[j], we[j]);
      if (t0 > 0) {
        const Block<T> hb = halo[cur];
        for (int64_t q = std::min(t1, t0 + s) - 1; q >= t0; --q) {
          const int64_t k = off + (q - s) - (t0 - s);
          combine<T>(x.h[q], x.u[q], x.e[q], hb.h[k], hb.u[k], hb.e[k], wm[j], we[j]);
        }
      }
    }
    cur = 1 - cur;
  }
  for (int64_t j = tiled; j < p.K; ++j) {
    const int64_t s = int64_t{1} << j;
    // Descending, so x[q - s] still holds the previous level when it is read.
    for (int64_t q = L - 1; q >= s; --q)
      combine<T>(x.h[q], x.u[q], x.e[q], x.h[q - s], x.u[q - s], x.e[q - s], wm[j], we[j]);
  }
  for (int64_t q = 0; q < L; ++q) {
    const bool valid = !p.mask || p.mask[q];
    const V<T> u = x.u[q];
    V<T> o = x.h[q] / u;
    o = u > splat<T>(0) ? o : V<T>{};
    store(p.o + q * N, valid ? o : V<T>{}, N);
  }
}

template <typename T>
void backward_block_exact(const AIBScanParams<T>& p, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t L = p.L, K = p.K;
  // Recompute the forward levels, keeping each one: snapshot j is the state before level j.
  load_level0(p, block_at<T>(scratch, 0, L));
  for (int64_t j = 0; j < K; ++j) {
    const int64_t s = int64_t{1} << j;
    V<T> wm;
    I<T> we;
    level_weight(p, j, wm, we);
    const Block<T> x = block_at<T>(scratch, j, L), y = block_at<T>(scratch, j + 1, L);
    copy_slots(y, 0, x, 0, s);
    for (int64_t q = s; q < L; ++q) {
      V<T> h = x.h[q], u = x.u[q];
      I<T> e = x.e[q];
      combine<T>(h, u, e, x.h[q - s], x.u[q - s], x.e[q - s], wm, we);
      y.h[q] = h;
      y.u[q] = u;
      y.e[q] = e;
    }
  }
  // Output adjoints: dL/dH = g / U, dL/dU = -g O / U, as mantissas (r, k) * 2^f, f = -e.
  const Block<T> fin = block_at<T>(scratch, K, L);
  const Block<T> adj = block_at<T>(scratch, K + 1, L);  // h: r, u: k, e: f
  for (int64_t q = 0; q < L; ++q) {
    const bool valid = !p.mask || p.mask[q];
    const V<T> u = fin.u[q];
    const auto live = u > splat<T>(0);
    const V<T> g = valid ? load(p.grad_o + q * N, N) : V<T>{};
    const V<T> o = fin.h[q] / u;
    adj.h[q] = live ? g / u : V<T>{};
    adj.u[q] = live ? -g * o / u : V<T>{};
    adj.e[q] = live ? -fin.e[q] : isplat<T>(kSentinel);
  }
  // Transposed levels in reverse order; level j's weight gradient pairs the adjoint after
  // level j with the forward state before it.
  for (int64_t j = K - 1; j >= 0; --j) {
    const int64_t s = int64_t{1} << j;
    V<T> wm;
    I<T> we;
    level_weight(p, j, wm, we);
    const Block<T> x = block_at<T>(scratch, j, L);
    VD<T> acc{};
    for (int64_t q = s; q < L; ++q) {
      const V<T> t = (adj.h[q] * x.h[q - s] + adj.u[q] * x.u[q - s]) * wm;
      acc += __builtin_convertvector(scale<T>(t, adj.e[q] + x.e[q - s] + we), VD<T>);
    }
    for (int64_t c = 0; c < N; ++c) p.grad_lw[j * N + c] = acc[c];
    // Ascending, so adj[q + s] still holds the later level when it is read.
    for (int64_t q = 0; q + s < L; ++q)
      combine<T>(adj.h[q], adj.u[q], adj.e[q], adj.h[q + s], adj.u[q + s], adj.e[q + s], wm, we);
  }
  // dV = E dL/dH, dA = E (dL/dU + V dL/dH), with E = u0 * 2^e0 from snapshot 0.
  const Block<T> x0 = block_at<T>(scratch, 0, L);
  for (int64_t q = 0; q < L; ++q) {
    const int64_t off = q * N;
    if (p.mask && !p.mask[q]) {
      store(p.grad_v + off, V<T>{}, N);
      store(p.grad_a + off, V<T>{}, N);
      continue;
    }
    const I<T> ex = adj.e[q] + x0.e[q];
    const V<T> v = load(p.v + off, N);
    store(p.grad_v + off, scale<T>(adj.h[q] * x0.u[q], ex), N);
    store(p.grad_a + off, scale<T>(x0.u[q] * (adj.u[q] + v * adj.h[q]), ex), N);
  }
}

// ---- Fast path: plain floating point on E = exp(A - c), with one scale c per tile of
// positions and channel: the running maximum of A over the valid positions scanned so far
// (plus a shift when the distance weights are large). Every E is then at most 1, and because
// c only grows along the scan, every rescale factor exp(c_earlier - c_later) that carries an
// earlier tile's sums into a later one is at most 1 too: it is folded into that level's
// weight, exp(lw + c_earlier - c_later), computed by exponent arithmetic so it cannot
// overflow. O = H / U is unchanged by the per-tile scale (it multiplies H and U alike).
// A block reads its rows straight from the caller's [B, L, D] tensors and writes results
// back with streaming stores. Nothing is bounded in advance except the
// weights; instead every result is checked where it is final: live U in [2^kTinyExp, max],
// finite O (forward) or finite gradients (backward). A block that fails reruns on the
// exponent path, which overwrites everything it wrote.

// Position q of one channel block in scan order: p + q * step (step = +-D), n valid lanes.
// With bfloat16 storage (mixed precision, T = float) pb replaces p: rows are widened to
// float as they are read.
template <typename T>
struct Src {
  const T* p = nullptr;
  const uint16_t* pb = nullptr;
  int64_t step = 0, n = 0;
};

template <typename T>
inline V<T> get(const Src<T>& s, int64_t q) {
  if constexpr (std::is_same_v<T, float>)
    if (s.pb) return load_bf16(s.pb + q * s.step, s.n);
  return load(s.p + q * s.step, s.n);
}

template <typename T>
inline void prefetch(const Src<T>& s, int64_t q) {
  const char* at = s.pb ? reinterpret_cast<const char*>(s.pb + q * s.step)
                        : reinterpret_cast<const char*>(s.p + q * s.step);
  _mm_prefetch(at, _MM_HINT_T0);
}

// Where a block's results go (same addressing as Src; pb: bfloat16 storage, each value
// rounded once as it is written). Full aligned vectors are written with streaming stores:
// whole cache lines that are not read back here, so no read-for-ownership.
template <typename T>
struct Dest {
  T* p = nullptr;
  uint16_t* pb = nullptr;
  int64_t step = 0, n = 0;
};

template <typename T>
inline void put(const Dest<T>& d, int64_t q, V<T> x) {
  if constexpr (std::is_same_v<T, float>)
    if (d.pb) {
      // Half a cache line per row: streaming it would write partial lines.
      store_bf16(d.pb + q * d.step, x, d.n);
      return;
    }
  T* ptr = d.p + q * d.step;
  if (d.n != Traits<T>::N || (reinterpret_cast<uintptr_t>(ptr) & 63) != 0) {
    store(ptr, x, d.n);
    return;
  }
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>)
    _mm512_stream_ps(ptr, reinterpret_cast<__m512>(x));
  else
    _mm512_stream_pd(ptr, reinterpret_cast<__m512d>(x));
#else
  for (int k = 0; k < 4; ++k) {
    if constexpr (std::is_same_v<T, float>) {
      __m128 part;
      std::memcpy(&part, reinterpret_cast<const char*>(&x) + 16 * k, 16);
      _mm_stream_ps(ptr + 4 * k, part);
    } else {
      __m128d part;
      std::memcpy(&part, reinterpret_cast<const char*>(&x) + 16 * k, 16);
      _mm_stream_pd(ptr + 2 * k, part);
    }
  }
#endif
}

// One channel block of one sequence (one half of the bidirectional form), in scan order.
template <typename T>
struct FastBlock {
  int64_t L = 0, K = 0;
  const uint8_t* mask = nullptr;  // [L] in scan order (1 = valid), or null
  const T* lw = nullptr;          // [K][N] log distance weights, padded lanes 0
  Src<T> a, v, go;
  Dest<T> o, ga, gv;
};

template <typename T>
struct FastSetup {
  V<T> lw[64];    // log weight per level
  V<T> W[64];     // exp(lw)
  V<T> pos[65];   // pos[j] = sum over levels i < j of max(0, lw_i)
  bool ok = true;
};

template <typename T>
inline V<T> exp_scaled(V<T> x) {  // exp(x) for any x, 0 or the largest finite value at the ends
  V<T> m;
  I<T> k;
  exp_split<T>(x, m, k);
  return scale<T>(m, k);
}

template <typename T>
FastSetup<T> fast_setup(const FastBlock<T>& b) {
  constexpr int64_t N = Traits<T>::N;
  FastSetup<T> f;
  f.pos[0] = V<T>{};
  for (int64_t j = 0; j < b.K; ++j) {
    f.lw[j] = load(b.lw + j * N, N);
    f.W[j] = exp_scaled<T>(f.lw[j]);
    f.pos[j + 1] = f.pos[j] + (f.lw[j] > splat<T>(0) ? f.lw[j] : V<T>{});
  }
  for (int c = 0; c < N; ++c)
    if (!(f.pos[b.K][c] < Traits<T>::kMaxT)) f.ok = false;
  return f;
}

// Mantissas are kept below 2^kRowBits: phase 1 by the tile scale's shift, the column levels
// by row exponents chosen from an upper bound on each row's sums. A row then holds values
// from 2^kRowBits down to the smallest normal number (float: 190 bits): room for columns a
// padded row leaves at zero while its neighbours grow by huge distance weights.
template <typename T>
constexpr int kRowBits = std::is_same_v<T, float> ? 64 : 500;

// How far E is scaled down (in nats) for the tiles up to position q: after the tile levels
// (shifts below T = 2^m), a sum at q covers distances d < min(q + 1, T), whose weights are at
// most prod_j max(1, W_j) over the levels j < m with 2^j <= q, and E <= 1, so every U is at
// most min(q + 1, T) times that; the shift keeps this bound at 2^kRowBits (|V| may take up
// the slack; the checks where results are final catch the rest). The longer levels are
// scaled row by row instead (fast_phase1). The shift grows with q, so the tile scales still
// only grow.
template <typename T>
inline V<T> shift_upto(const FastSetup<T>& f, int64_t q, int64_t m) {
  int64_t levels = 0;
  while (levels < m && (int64_t{1} << levels) <= q) ++levels;
  constexpr double ln2 = 0.6931471805599453;
  const double reach = static_cast<double>(std::min(q + 1, int64_t{1} << m));
  const V<T> s = f.pos[levels] + static_cast<T>(std::log(reach) - kRowBits<T> * ln2);
  return s > splat<T>(0) ? s : V<T>{};
}

// "No valid position yet": combining with it gives factor exp(lowest - c) = 0.
template <typename T>
constexpr T kNoScale = -std::numeric_limits<T>::max();

// The lower bound on every live U and the finite range, checked where results are final.
template <typename T>
inline V<T> fast_tiny() {
  return splat<T>(std::ldexp(T(1), Traits<T>::kTinyExp));
}

template <typename T>
inline I<T> not_finite(V<T> x) {
  const V<T> hi = splat<T>(std::numeric_limits<T>::max());
  return ~((x >= -hi) & (x <= hi));  // NaN compares false
}

template <typename T>
inline bool any_lane(I<T> x) {
  for (int c = 0; c < Traits<T>::N; ++c)
    if (x[c]) return true;
  return false;
}

// Weights of the m tile levels for the carries from a tile with scale c0 into one with c1.
template <typename T>
inline void carry_weights(const FastSetup<T>& f, int64_t m, V<T> c0, V<T> c1, V<T>* wc) {
  const V<T> d = c0 - c1;  // <= 0 (0 when neither tile has a valid position)
  // The scale rarely changes between tiles once the running maximum has settled; then the
  // weights are W itself (exp_scaled(lw + 0) is exactly W).
  if (!any_lane<T>(d != V<T>{})) {
    std::copy(f.W, f.W + m, wc);
    return;
  }
  for (int64_t j = 0; j < m; ++j) wc[j] = exp_scaled<T>(f.lw[j] + d);
}

// Levels 0 .. m - 1 on one tile of T = 2^m positions, weights W (wc for the carries, which
// come from the previous tile at its scale). Carries: level j's 2^j values at offset 2^j - 1
// of a [T] area (h then u areas, T apart). `in` is the previous tile's (null for the first
// tile), `out` receives this tile's (null if not needed).
template <typename T>
inline void fast_tile_levels(const V<T>* W, const V<T>* wc, int64_t m, V<T>* h, V<T>* u,
                             const V<T>* in, V<T>* out) {
  const int64_t Tn = int64_t{1} << m;
  for (int64_t j = 0; j < m; ++j) {
    const int64_t s = int64_t{1} << j, off = s - 1;
    const V<T> w = W[j];
    if (out) {
      std::memcpy(out + off, h + Tn - s, sizeof(V<T>) * static_cast<size_t>(s));
      std::memcpy(out + Tn + off, u + Tn - s, sizeof(V<T>) * static_cast<size_t>(s));
    }
    for (int64_t q = Tn - 1; q >= s; --q) {  // descending: [q - s] is still level j
      h[q] += w * h[q - s];
      u[q] += w * u[q - s];
    }
    if (in) {
      const V<T> w_in = wc[j];
      for (int64_t q = 0; q < s; ++q) {  // position q - s of the previous tile
        h[q] += w_in * in[off + q];
        u[q] += w_in * in[Tn + off + q];
      }
    }
  }
}

// The backward's recompute of one tile: snapshot j (the state before level j) at [2 j T] (h)
// and [(2 j + 1) T] (u), j = 0 .. m - 1, from snapshot 0 (x^0) and the previous tile's
// carries `in` (null for the first tile) with their weights wc. The last level's output is
// not needed there.
template <typename T>
inline void tile_snapshots(const V<T>* W, const V<T>* wc, int64_t m, V<T>* snap, const V<T>* in) {
  const int64_t Tn = int64_t{1} << m;
  for (int64_t j = 0; j + 1 < m; ++j) {
    const int64_t s = int64_t{1} << j, off = s - 1;
    const V<T> w = W[j];
    const V<T>*xh = snap + 2 * j * Tn, *xu = xh + Tn;
    V<T>*yh = snap + 2 * (j + 1) * Tn, *yu = yh + Tn;
    for (int64_t q = 0; q < s; ++q) {
      yh[q] = in ? xh[q] + wc[j] * in[off + q] : xh[q];
      yu[q] = in ? xu[q] + wc[j] * in[Tn + off + q] : xu[q];
    }
    for (int64_t q = s; q < Tn; ++q) {
      yh[q] = xh[q] + w * xh[q - s];
      yu[q] = xu[q] + w * xu[q - s];
    }
  }
}

// The carries tile t leaves for tile t + 1: every tile's in the backward layout (the
// backward recompute reads them again), two alternating slots in the forward one.
template <typename T>
inline V<T>* carry_slot(const AIBFastLayout& lay, V<T>* base, int64_t t) {
  return base + lay.carry + 2 * lay.T * (lay.backward ? t : (t & 1));
}

// The fast path runs in two phases on the sequence padded to an [R][T] grid (T = 2^m
// positions per tile; aib_fast_layout). The level operators I + W_j S^(2^j) commute, so the
// levels may run in any order and grouping:
// * Phase 1, tile by tile: E, E V and the m levels with shifts below T, while the tile is in
//   L1. A tile reads the previous tile's last 2^j values of level j from a carry area,
//   written before that tile advanced past level j.
// * Phase 2, C columns at a time: the levels with shifts of T or more are scans down the
//   columns of the grid (shift 2^j = 2^(j-m) rows), gathered into a dense chunk so all of
//   them run in L1/L2 instead of streaming the whole block once per level; then the output.
// Backward reverses this: phase 2 recomputes the column levels with snapshots, forms the
// output adjoints and runs the transposed column levels; phase 1 then walks the tiles
// backwards, recomputing each tile's levels from its stored carries and running the
// transposed tile levels with carries from the following tile.
// The blocks of a work item (adjacent channel blocks: adjacent cache lines of every row) run
// in lock step, tile by tile and chunk by chunk, so each row's lines are fetched together:
// a single line per row, D elements apart, reads at a third of the speed (measured).

// One block's fast-path attempt: its view of the tensors, weights, scratch and running state.
template <typename T>
struct FastRun {
  FastBlock<T> b;
  FastSetup<T> f;
  V<T>* base = nullptr;  // block scratch (AIBFastLayout offsets)
  bool live = false;     // still on the fast path
  I<T> bad{};            // lanes whose final-result checks failed
  VD<T> gacc[64] = {};   // backward: d lw per level
  V<T> runmax = splat<T>(kNoScale<T>);  // max A over the valid positions scanned so far
  V<T> wn[kAIBFastTileBits] = {};  // backward: carry weights of the tile after the current one
  int cur = 0;                     // backward: which adjoint-carry slot holds the next tile's
};

// x^0 = (E V, E), E = exp(A - c[k]), of the tile [t0, t0 + T) for the item's blocks: block
// k's h at h[k][i], u at h[k][us + i]; zero past L and at masked positions. Rows are read for
// all blocks at once, and the rows `ahead` positions away (the next tile in walk order) are
// prefetched: a row's lines are D elements apart, which the hardware prefetchers miss.
template <typename T>
void group_x0(FastRun<T>* runs, int64_t n, int64_t t0, int64_t Tn, const V<T>* c, V<T>* const* h,
              int64_t us, int64_t ahead) {
  const FastBlock<T>& b0 = runs[0].b;  // the mask and L are the item's
  for (int64_t i = 0; i < Tn; ++i) {
    const int64_t q = t0 + i, qa = q + ahead;
    if (qa >= 0 && qa < b0.L)
      for (int64_t k = 0; k < n; ++k) {
        prefetch(runs[k].b.a, qa);
        prefetch(runs[k].b.v, qa);
      }
    const bool valid = q < b0.L && (!b0.mask || b0.mask[q]);
    for (int64_t k = 0; k < n; ++k) {
      if (!valid) {
        h[k][i] = V<T>{};
        h[k][us + i] = V<T>{};
        continue;
      }
      V<T> m;
      I<T> e;
      exp_split<T>(get(runs[k].b.a, q) - c[k], m, e);
      const V<T> E = m * pow2_nonpos<T>(e);  // A <= c, so e <= 0
      h[k][i] = E * get(runs[k].b.v, q);
      h[k][us + i] = E;
    }
  }
}

// Phase 1, tile t of the live blocks: scales (kept at lay.scales), x^0 and the tile levels,
// into each block's state [Lp] (h, then u at +Lp). Rows are read for all blocks at once.
template <typename T>
void phase1_tile(FastRun<T>* runs, int64_t n, const AIBFastLayout& lay, int64_t t) {
  const int64_t t0 = t * lay.T;
  const V<T> none = splat<T>(kNoScale<T>);
  V<T> mx[aib_group_blocks()], mn[aib_group_blocks()];
  for (int64_t k = 0; k < n; ++k) {
    mx[k] = none;
    mn[k] = splat<T>(std::numeric_limits<T>::max());
  }
  const FastBlock<T>& b0 = runs[0].b;  // the mask and L are the item's
  bool padded = false;
  for (int64_t q = t0; q < std::min(b0.L, t0 + lay.T); ++q) {
    if (b0.mask && !b0.mask[q]) {
      padded = true;
      continue;
    }
    for (int64_t k = 0; k < n; ++k) {
      const V<T> x = get(runs[k].b.a, q);
      mx[k] = x > mx[k] ? x : mx[k];
      mn[k] = x < mn[k] ? x : mn[k];
    }
  }
  // c = running max of A + this tile's shift: every E so far, rescaled to this tile, is at
  // most exp(-shift).
  V<T> c[aib_group_blocks()] = {};
  const int64_t qmax = std::min(b0.L, t0 + lay.T) - 1;
  for (int64_t k = 0; k < n; ++k) {
    FastRun<T>& r = runs[k];
    r.runmax = mx[k] > r.runmax ? mx[k] : r.runmax;
    c[k] = (r.base + lay.scales)[t] = r.runmax + shift_upto(r.f, qmax, lay.m);
    // Every sum of the tile holds its position's own E >= exp(min A - c): a lower bound on
    // the row's values at every column that counts (log2), unless a position is padded.
    const V<T> floor = splat<T>(T(-16777216));
    const V<T> low = (mn[k] - c[k]) * T(1.4426950408889634);
    (r.base + lay.rowmin)[t] = padded ? floor : (low < floor ? floor : low);
  }
  V<T>* h[aib_group_blocks()] = {};
  for (int64_t k = 0; k < n; ++k) h[k] = runs[k].base + lay.state + t0;
  group_x0(runs, n, t0, lay.T, c, h, lay.Lp, lay.T);
  for (int64_t k = 0; k < n; ++k) {
    FastRun<T>& r = runs[k];
    V<T>* h = r.base + lay.state + t0;
    V<T> wc[kAIBFastTileBits] = {};
    if (t > 0) carry_weights(r.f, lay.m, (r.base + lay.scales)[t - 1], c[k], wc);
    fast_tile_levels<T>(r.f.W, wc, lay.m, h, h + lay.Lp,
                        t > 0 ? carry_slot<T>(lay, r.base, t - 1) : nullptr,
                        t + 1 < lay.R ? carry_slot<T>(lay, r.base, t) : nullptr);
  }
}

// True if every lane of a row factor is exactly 1 (the row keeps its exponent).
template <typename T>
inline bool unit(V<T> f) {
  return !any_lane<T>(f != splat<T>(1));
}

// Row factors are normal numbers: 2^-kMinFactorExp and up (wm >= 2^-0.5 takes the rest).
template <typename T>
constexpr int kMinFactorExp = std::is_same_v<T, float> ? 125 : 1021;
template <typename T>
constexpr int kNormalExp = std::is_same_v<T, float> ? 126 : 1022;  // smallest normal: 2^-this

// ceil(x) as integer lanes, for |x| <= 2^24.
template <typename T>
inline I<T> ceil_int(V<T> x) {
  const I<T> t = __builtin_convertvector(x, I<T>);  // toward zero
  return t - (__builtin_convertvector(t, V<T>) < x);  // a true lane is -1
}

// The column levels' factors of one block. Row r's sums are mantissas x_r times
// exp(c_r) 2^e_r: c_r its tile scale from phase 1, e_r an integer exponent, 0 before the
// first column level. Column level i (shift rs rows, weight W) makes X_r + W X_{r - rs}; with
// exp(lw + c_{r - rs} - c_r) = wm 2^k (exact split), x'_r = rowa x_r + rowb x_{r - rs},
// rowa = 2^(e_r - e'_r), rowb = wm 2^(e_{r - rs} + k - e'_r). e'_r is picked from bound_r, an
// upper bound on log2 of the row's sums in units of exp(c_r) (phase 1's bound to start with;
// a row with no valid position within a tile's reach holds zeros and starts at -2^24): it
// stays e_r while the mantissas stay below 2^kRowBits, else it lifts them to just below.
// Exponent arithmetic is exact, so no rounding of a scale ever changes an effective weight,
// and the weights' product over all levels can be anything.
template <typename T>
void column_factors(FastRun<T>& run, const AIBFastLayout& lay) {
  if (lay.nh == 0) return;
  constexpr double log2e = 1.4426950408889634;
  const V<T>* c = run.base + lay.scales;
  auto* e = reinterpret_cast<I<T>*>(run.base + lay.rowe);
  V<T>*ra = run.base + lay.rowa, *rb = run.base + lay.rowb;
  // rowa of the last level is written last: until then it holds each row's bound.
  V<T>* bound = ra + (lay.nh - 1) * lay.R;
  const V<T> floor = splat<T>(T(-16777216));
  V<T>* lower = run.base + lay.rowmin;  // log2 of the smallest value, updated per level
  const FastBlock<T>& b = run.b;
  for (int64_t r = 0; r < lay.R; ++r) {
    e[r] = I<T>{};
    bool any = b.mask == nullptr;
    const int64_t q0 = std::max<int64_t>(0, (r - 1) * lay.T);
    for (int64_t q = q0; !any && q < std::min(b.L, (r + 1) * lay.T); ++q) any = b.mask[q] != 0;
    const int64_t q = std::min(b.L, (r + 1) * lay.T) - 1;
    const V<T> sh = shift_upto(run.f, q, lay.m);
    bound[r] = any ? splat<T>(T(lay.m)) + (run.f.pos[lay.m] - sh) * T(log2e) : floor;
  }
  for (int64_t i = 0; i < lay.nh; ++i) {
    const int64_t rs = int64_t{1} << i;
    V<T>*fa = ra + i * lay.R, *fb = rb + i * lay.R;
    // Descending, so row r - rs is still at the previous level when it is read; the bound
    // of row r is read before this level's rowa overwrites it (the last level's rowa is the
    // bound array itself).
    for (int64_t r = lay.R - 1; r >= rs; --r) {
      V<T> wm;
      I<T> k;
      exp_split<T>(run.f.lw[lay.m + i] + (c[r - rs] - c[r]), wm, k);
      // log2 wm < 0.51
      const V<T> src = bound[r - rs] + __builtin_convertvector(k, V<T>) + T(0.51);
      V<T> next = (bound[r] > src ? bound[r] : src) + T(1);
      next = next < floor ? floor : next;
      // The exponent moves only when the bound would pass 2^kRowBits: most rows keep
      // rowa = 1, and the column levels then cost one multiply-add per element.
      const I<T> lift = wrap_sub<T>(ceil_int<T>(next), isplat<T>(kRowBits<T>));
      const I<T> en = (next - __builtin_convertvector(e[r], V<T>)) > splat<T>(T(kRowBits<T>))
                          ? lift
                          : e[r];
      const I<T> ea = wrap_sub<T>(e[r], en), eb = wrap_sub<T>(wrap_add<T>(e[r - rs], k), en);
      // A factor below the normal range flushes a row: harmless if all it could carry is
      // below the smallest normal number (then under 2^-26 of any U that passes the final
      // check), else that row may still count where the other is small or 0 (padding), and
      // the block takes the exponent path.
      // ... or where, at some column, what it could carry is within 2^-24 of the least the
      // other row holds there (each row's smallest value is known where nothing is padded).
      const V<T> enf = __builtin_convertvector(en, V<T>), normal = splat<T>(T(-kNormalExp<T>));
      const V<T> kf = __builtin_convertvector(k, V<T>);
      const V<T> src_low = lower[r - rs] + kf - T(0.5);  // log2 wm > -0.5
      const I<T> lost = ((ea < isplat<T>(-kMinFactorExp<T>)) & (bound[r] - enf > normal) &
                         (bound[r] > src_low - T(24))) |
                        ((eb < isplat<T>(-kMinFactorExp<T>)) & (src - enf > normal) &
                         (src > lower[r] - T(24)));
      run.bad |= lost;
      const V<T> low = lower[r] > src_low ? lower[r] : src_low;
      lower[r] = low < floor ? floor : low;
      const V<T> a = pow2_clamped<T>(ea);
      const V<T> w = wm * pow2_clamped<T>(eb);
      e[r] = en;
      bound[r] = next;
      fa[r] = a;
      fb[r] = w;
    }
    for (int64_t r = 0; r < std::min(rs, lay.R); ++r) {
      fa[r] = splat<T>(1);
      fb[r] = V<T>{};
    }
  }
}

// Phase 1 of both passes for the live blocks, then each one's column-level factors.
template <typename T>
void fast_phase1(FastRun<T>* runs, int64_t n, const AIBFastLayout& lay) {
  for (int64_t t = 0; t < lay.R; ++t) phase1_tile(runs, n, lay, t);
  for (int64_t k = 0; k < n; ++k)
    if (runs[k].live) column_factors(runs[k], lay);
}

// Forward phase 2 on columns [c0, c0 + nc) of one block: the column levels, then O = H / U.
template <typename T>
void forward_chunk(FastRun<T>& run, const AIBFastLayout& lay, int64_t c0) {
  const FastBlock<T>& b = run.b;
  const int64_t nc = std::min(lay.C, lay.T - c0);
  const V<T>*sh = run.base + lay.state, *su = sh + lay.Lp;
  const V<T>*ra = run.base + lay.rowa, *rb = run.base + lay.rowb;
  V<T>*bh = run.base + lay.chunk, *bu = bh + lay.R * lay.C;
  for (int64_t r = 0; r < lay.R; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      bh[r * nc + c] = sh[r * lay.T + c0 + c];
      bu[r * nc + c] = su[r * lay.T + c0 + c];
    }
  for (int64_t i = 0; i < lay.nh; ++i) {
    const int64_t rs = int64_t{1} << i;
    for (int64_t r = lay.R - 1; r >= rs; --r) {  // descending: row r - rs is still level i
      const V<T> fa = ra[i * lay.R + r], fb = rb[i * lay.R + r];
      if (unit<T>(fa)) {
        for (int64_t c = 0; c < nc; ++c) {
          bh[r * nc + c] += fb * bh[(r - rs) * nc + c];
          bu[r * nc + c] += fb * bu[(r - rs) * nc + c];
        }
        continue;
      }
      for (int64_t c = 0; c < nc; ++c) {
        bh[r * nc + c] = fa * bh[r * nc + c] + fb * bh[(r - rs) * nc + c];
        bu[r * nc + c] = fa * bu[r * nc + c] + fb * bu[(r - rs) * nc + c];
      }
    }
  }
  const V<T> tiny = fast_tiny<T>();
  for (int64_t r = 0; r < lay.R; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t q = r * lay.T + c0 + c;
      if (q >= b.L) break;
      if (b.mask && !b.mask[q]) {
        put(b.o, q, V<T>{});
        continue;
      }
      const V<T> u = bu[r * nc + c];
      const V<T> o = bh[r * nc + c] / u;
      run.bad |= (u < tiny) | not_finite<T>(u) | not_finite<T>(o);
      put(b.o, q, o);
    }
}

// Backward phase 2 on columns [c0, c0 + nc) of one block: snapshot i (state before column
// level i) at [2 i R nc] (h) and [(2 i + 1) R nc] (u), i = 0 .. nh; the output adjoints; the
// transposed column levels. The adjoints of the tile levels' output replace the state.
template <typename T>
void backward_chunk(FastRun<T>& run, const AIBFastLayout& lay, int64_t c0) {
  const FastBlock<T>& b = run.b;
  const int64_t R = lay.R, Tn = lay.T, nh = lay.nh;
  const int64_t nc = std::min(lay.C, Tn - c0), n = R * nc;
  V<T>*sh = run.base + lay.state, *su = sh + lay.Lp;
  const V<T>*ra = run.base + lay.rowa, *rb = run.base + lay.rowb;
  V<T>* chunk = run.base + lay.chunk;
  auto S = [&](int64_t i) { return chunk + 2 * i * n; };
  V<T>*ah = chunk + 2 * (nh + 1) * n, *au = ah + n;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      S(0)[r * nc + c] = sh[r * Tn + c0 + c];
      S(0)[n + r * nc + c] = su[r * Tn + c0 + c];
    }
  for (int64_t i = 0; i < nh; ++i) {
    const int64_t rs = int64_t{1} << i;
    const V<T>* x = S(i);
    V<T>* y = S(i + 1);
    std::memcpy(y, x, sizeof(V<T>) * static_cast<size_t>(rs * nc));
    std::memcpy(y + n, x + n, sizeof(V<T>) * static_cast<size_t>(rs * nc));
    for (int64_t r = rs; r < R; ++r) {
      const V<T> fa = ra[i * R + r], fb = rb[i * R + r];
      if (unit<T>(fa)) {
        for (int64_t k = r * nc; k < (r + 1) * nc; ++k) {
          y[k] = x[k] + fb * x[k - rs * nc];
          y[n + k] = x[n + k] + fb * x[n + k - rs * nc];
        }
        continue;
      }
      for (int64_t k = r * nc; k < (r + 1) * nc; ++k) {
        y[k] = fa * x[k] + fb * x[k - rs * nc];
        y[n + k] = fa * x[n + k] + fb * x[n + k - rs * nc];
      }
    }
  }
  // Output adjoints: dL/dH = g / U, dL/dU = -g H / U^2 (of the scaled sums).
  const V<T>*fh = S(nh), *fu = fh + n;
  const V<T> tiny = fast_tiny<T>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t q = r * Tn + c0 + c, k = r * nc + c;
      const bool valid = q < b.L && (!b.mask || b.mask[q]);
      if (valid) run.bad |= (fu[k] < tiny) | not_finite<T>(fu[k]);
      const V<T> g = valid ? get(b.go, q) : V<T>{};
      const V<T> inv = splat<T>(1) / fu[k];
      const auto live = fu[k] > splat<T>(0);
      ah[k] = live ? g * inv : V<T>{};
      au[k] = live ? -g * fh[k] * inv * inv : V<T>{};
    }
  // Transposed column levels, last first: the adjoint of x_r is rowa_r y_r +
  // rowb_{r + rs} y_{r + rs}. Each ascending pass reads the adjoint of row r for the weight
  // gradient (d x'_r / d lw = rowb_r x_{r - rs}) before updating it, and row r + rs's, not
  // yet updated.
  for (int64_t i = nh - 1; i >= 0; --i) {
    const int64_t rs = int64_t{1} << i, d = rs * nc;
    const V<T>* x = S(i);
    V<T> part{};
    for (int64_t r = 0; r < R; ++r) {
      const V<T> fa = ra[i * R + r];
      const V<T> fn = r + rs < R ? rb[i * R + r + rs] : V<T>{};
      V<T> row{};  // this row's gradient terms, times its factor once
      // One loop per case, so the common one (rowa = 1) stays a single multiply-add.
      auto sweep = [&](auto plain) {
        for (int64_t k = r * nc; k < (r + 1) * nc; ++k) {
          if (r >= rs) row += ah[k] * x[k - d] + au[k] * x[n + k - d];
          if constexpr (decltype(plain)::value) {
            if (r + rs < R) {
              ah[k] += fn * ah[k + d];
              au[k] += fn * au[k + d];
            }
          } else if (r + rs < R) {
            ah[k] = fa * ah[k] + fn * ah[k + d];
            au[k] = fa * au[k] + fn * au[k + d];
          } else {
            ah[k] *= fa;
            au[k] *= fa;
          }
        }
      };
      if (unit<T>(fa))
        sweep(std::true_type{});
      else
        sweep(std::false_type{});
      if (r >= rs) part += row * rb[i * R + r];
    }
    run.gacc[lay.m + i] += __builtin_convertvector(part, VD<T>);
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < nc; ++c) {
      sh[r * Tn + c0 + c] = ah[r * nc + c];
      su[r * Tn + c0 + c] = au[r * nc + c];
    }
}

// Backward phase 1, tile t of one block (tiles run last first): recompute the tile's levels
// (snapshots), then the transposed tile levels on its adjoints, with the next tile's adjoint
// carries from rcarry[cur] and this tile's for the previous one into rcarry[1 - cur]; then
// dV = E dL/dH and dA = E (dL/dU + V dL/dH).
template <typename T>
void backward_tile(FastRun<T>& run, const AIBFastLayout& lay, int64_t t) {
  const FastBlock<T>& b = run.b;
  const int64_t R = lay.R, Tn = lay.T, m = lay.m;
  V<T>* base = run.base;
  const V<T>* scales = base + lay.scales;
  V<T>* snap = base + lay.tile;  // m snapshots; group_x0 wrote the first
  V<T>* rc[2] = {base + lay.rcarry, base + lay.rcarry + 2 * Tn};
  const int64_t t0 = t * Tn;
  const V<T>* cin = t > 0 ? carry_slot<T>(lay, base, t - 1) : nullptr;
  V<T> wc[kAIBFastTileBits] = {};  // carry weights from tile t - 1 into this one
  if (cin) carry_weights(run.f, m, scales[t - 1], scales[t], wc);
  tile_snapshots<T>(run.f.W, wc, m, snap, cin);
  V<T>*ah = base + lay.state + t0, *au = ah + lay.Lp;
  const V<T>* rin = t + 1 < R ? rc[run.cur] : nullptr;
  V<T>* rout = t > 0 ? rc[1 - run.cur] : nullptr;
  for (int64_t j = m - 1; j >= 0; --j) {
    const int64_t s = int64_t{1} << j, off = s - 1;
    const V<T> w = run.f.W[j];
    const V<T>*xh = snap + 2 * j * Tn, *xu = xh + Tn;
    if (rout) {
      std::memcpy(rout + off, ah, sizeof(V<T>) * static_cast<size_t>(s));
      std::memcpy(rout + Tn + off, au, sizeof(V<T>) * static_cast<size_t>(s));
    }
    // Gradient terms: those reading the previous tile's carry (q < s) have weight wc[j],
    // the rest w; each sum is multiplied by its weight once.
    V<T> pin{}, part{};
    // q < s: the gradient term reads the previous tile (its carry); s <= T / 2, so the
    // update still reads this tile.
    for (int64_t q = 0; q < s; ++q) {
      if (cin) pin += ah[q] * cin[off + q] + au[q] * cin[Tn + off + q];
      ah[q] += w * ah[q + s];
      au[q] += w * au[q + s];
    }
    for (int64_t q = s; q < Tn - s; ++q) {
      part += ah[q] * xh[q - s] + au[q] * xu[q - s];
      ah[q] += w * ah[q + s];
      au[q] += w * au[q + s];
    }
    // q >= T - s: the update reads the next tile's adjoints (before its level j).
    for (int64_t q = std::max(s, Tn - s); q < Tn; ++q) {
      part += ah[q] * xh[q - s] + au[q] * xu[q - s];
      if (rin) {
        ah[q] += run.wn[j] * rin[off + q + s - Tn];
        au[q] += run.wn[j] * rin[Tn + off + q + s - Tn];
      }
    }
    run.gacc[j] += __builtin_convertvector(part * w + pin * wc[j], VD<T>);
  }
  const V<T>* e0 = snap + Tn;  // E, from snapshot 0
  for (int64_t q = 0; q < Tn && t0 + q < b.L; ++q) {
    const int64_t pos = t0 + q;
    if (b.mask && !b.mask[pos]) {
      put(b.gv, pos, V<T>{});
      put(b.ga, pos, V<T>{});
      continue;
    }
    const V<T> gv = ah[q] * e0[q], ga = e0[q] * (au[q] + get(b.v, pos) * ah[q]);
    run.bad |= not_finite<T>(gv) | not_finite<T>(ga);
    put(b.gv, pos, gv);
    put(b.ga, pos, ga);
  }
  std::copy(wc, wc + m, run.wn);
  run.cur = 1 - run.cur;
}

template <typename T>
bool any_live(const FastRun<T>* runs, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    if (runs[k].live) return true;
  return false;
}

template <typename T>
void forward_fast(FastRun<T>* runs, int64_t n, const AIBFastLayout& lay) {
  if (!any_live(runs, n)) return;
  fast_phase1(runs, n, lay);
  for (int64_t c0 = 0; c0 < lay.T; c0 += lay.C)
    for (int64_t k = 0; k < n; ++k)
      if (runs[k].live) forward_chunk(runs[k], lay, c0);
}

template <typename T>
void backward_fast(FastRun<T>* runs, int64_t n, const AIBFastLayout& lay) {
  if (!any_live(runs, n)) return;
  fast_phase1(runs, n, lay);
  for (int64_t c0 = 0; c0 < lay.T; c0 += lay.C) {
    // dL/dO of the next chunk: R rows, D T elements apart.
    for (int64_t r = 0; r < lay.R; ++r)
      for (int64_t q = r * lay.T + c0 + lay.C; q < std::min(r * lay.T + c0 + 2 * lay.C, (r + 1) * lay.T); ++q)
        if (q < runs[0].b.L)
          for (int64_t k = 0; k < n; ++k) prefetch(runs[k].b.go, q);
    for (int64_t k = 0; k < n; ++k)
      if (runs[k].live) backward_chunk(runs[k], lay, c0);
  }
  for (int64_t k = 0; k < n; ++k)
    if (runs[k].live && any_lane<T>(runs[k].bad)) runs[k].live = false;
  for (int64_t t = lay.R - 1; t >= 0; --t) {
    V<T> c[aib_group_blocks()] = {};
    V<T>* work[aib_group_blocks()] = {};
    for (int64_t k = 0; k < n; ++k) {
      c[k] = (runs[k].base + lay.scales)[t];
      work[k] = runs[k].base + lay.tile;
    }
    group_x0(runs, n, t * lay.T, lay.T, c, work, lay.T, -lay.T);
    for (int64_t k = 0; k < n; ++k)
      if (runs[k].live) backward_tile(runs[k], lay, t);
  }
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < runs[k].b.K; ++j)
      for (int c = 0; c < Traits<T>::N; ++c)
        if (!std::isfinite(runs[k].gacc[j][c])) runs[k].bad[c] = -1;
}

// ---- Work items. One item is up to aib_group_blocks() adjacent channel blocks (N channels
// each) of one sequence, or of one half of it for the bidirectional form (the suffix half is
// scanned in reverse, so every block sees the causal form). The exponent path needs a block
// as a dense [1, L, N] problem: only then are its rows copied into the staging area.

struct Item {
  int64_t b, c0, nc, nblk;
  bool rev;
};

inline Item item_of(int64_t item, int64_t D, bool bidir, int64_t N) {
  const int64_t halves = bidir ? 2 : 1, hd = D / halves;
  const int64_t span = N * aib_group_blocks(), ng = (hd + span - 1) / span;
  Item g;
  g.b = item / (halves * ng);
  const int64_t r = item % (halves * ng);
  const int64_t half = r / ng, grp = r % ng;
  g.c0 = half * hd + grp * span;
  g.nc = std::min<int64_t>(span, hd - grp * span);
  g.nblk = (g.nc + N - 1) / N;
  g.rev = half == 1;
  return g;
}

// Staging after the blocks' scratch: mask [L], three [L][N] arrays, log weights [G][K][N].
template <typename T>
struct Staging {
  uint8_t* mask;
  T *x0, *x1, *x2, *lw;
};

template <typename T>
Staging<T> staging_at(void* base, int64_t L, int64_t N) {
  Staging<T> st;
  st.mask = static_cast<uint8_t*>(base);
  auto* t = reinterpret_cast<T*>(st.mask + ((L + 63) / 64) * 64);
  st.x0 = t;
  st.x1 = t + L * N;
  st.x2 = t + 2 * L * N;
  st.lw = t + 3 * L * N;
  return st;
}

// Block k of item g: its view of the caller's tensors (null ones stay null) in scan order,
// with its log weights staged (the item's mask is staged by stage_mask).
template <typename T>
FastBlock<T> block_of(const AIBScanParams<T>& p, const Item& g, int64_t k, const Staging<T>& st) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t L = p.L, c0 = g.c0 + k * N, nc = std::min(N, g.nc - k * N);
  T* lw = st.lw + k * p.K * N;
  for (int64_t j = 0; j < p.K; ++j) store(lw + j * N, load(p.lw + j * p.D + c0, nc), N);
  const int64_t off = (g.b * L + (g.rev ? L - 1 : 0)) * p.D + c0, step = g.rev ? -p.D : p.D;
  auto src = [&](const T* x, const uint16_t* xb) {
    if (xb) return Src<T>{nullptr, xb + off, step, nc};
    return x ? Src<T>{x + off, nullptr, step, nc} : Src<T>{};
  };
  auto dst = [&](T* x, uint16_t* xb) {
    if (xb) return Dest<T>{nullptr, xb + off, step, nc};
    return x ? Dest<T>{x + off, nullptr, step, nc} : Dest<T>{};
  };
  FastBlock<T> b;
  b.L = L;
  b.K = p.K;
  b.mask = p.mask ? st.mask : nullptr;
  b.lw = lw;
  b.a = src(p.a, p.bf16.a);
  b.v = src(p.v, p.bf16.v);
  b.go = src(p.grad_o, p.bf16.grad_o);
  b.o = dst(p.o, p.bf16.o);
  b.ga = dst(p.grad_a, p.bf16.grad_a);
  b.gv = dst(p.grad_v, p.bf16.grad_v);
  return b;
}

template <typename T>
void stage_mask(const AIBScanParams<T>& p, const Item& g, const Staging<T>& st) {
  const int64_t L = p.L;
  for (int64_t i = 0; i < L; ++i) st.mask[g.rev ? L - 1 - i : i] = p.mask ? p.mask[g.b * L + i] : 1;
}

template <typename T>
void stage_in(const Src<T>& s, T* dst, int64_t L) {
  for (int64_t q = 0; q < L; ++q) store(dst + q * Traits<T>::N, get(s, q), Traits<T>::N);
}

template <typename T>
void stage_out(const T* src, const Dest<T>& d, int64_t L) {
  for (int64_t q = 0; q < L; ++q)
    put(d, q, load(src + q * Traits<T>::N, Traits<T>::N));
}

// The dense [1, L, N] problem of a staged block, for the exponent path.
template <typename T>
AIBScanParams<T> staged_params(const FastBlock<T>& b, const Staging<T>& st) {
  AIBScanParams<T> q;
  q.B = 1;
  q.L = b.L;
  q.D = Traits<T>::N;
  q.K = b.K;
  q.bidirectional = false;
  q.mask = st.mask;
  q.lw = b.lw;
  q.a = st.x0;
  q.v = st.x1;
  return q;
}

// Sets up the item's blocks for the fast path; each one runs on the exponent path instead if
// that is forced or its weights rule the fast path out.
template <typename T>
int64_t start_item(const AIBScanParams<T>& p, const Item& g, const Staging<T>& st, void* scratch,
                   int64_t block_bytes, FastRun<T>* runs) {
  stage_mask(p, g, st);
  for (int64_t k = 0; k < g.nblk; ++k) {
    runs[k] = FastRun<T>{};
    runs[k].b = block_of(p, g, k, st);
    runs[k].f = fast_setup(runs[k].b);
    runs[k].base = reinterpret_cast<V<T>*>(static_cast<char*>(scratch) + k * block_bytes);
    runs[k].live = !aib_exact_path_forced() && runs[k].f.ok;
  }
  return g.nblk;
}

// True if block run must (re)run on the exponent path; a fast attempt that gave up is counted.
template <typename T>
bool needs_exact_path(const FastRun<T>& run) {
  if (aib_exact_path_forced()) return true;
  if (run.live && !any_lane<T>(run.bad)) return false;
  aib_count_fallback();
  return true;
}

template <typename T>
void forward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t bb = aib_block_scratch_bytes(p.L, p.K, N, sizeof(T), false);
  Staging<T> st = staging_at<T>(static_cast<char*>(scratch) + aib_group_blocks() * bb, p.L, N);
  FastRun<T> runs[aib_group_blocks()];
  const AIBFastLayout lay = aib_fast_layout(p.L, p.K, false);
  for (int64_t item = begin; item < end; ++item) {
    const Item g = item_of(item, p.D, p.bidirectional, N);
    const int64_t n = start_item(p, g, st, scratch, bb, runs);
    forward_fast(runs, n, lay);
    for (int64_t k = 0; k < n; ++k) {
      const FastRun<T>& run = runs[k];
      if (!needs_exact_path(run)) continue;
      AIBScanParams<T> q = staged_params(run.b, st);
      stage_in(run.b.a, st.x0, p.L);
      stage_in(run.b.v, st.x1, p.L);
      q.o = st.x2;
      forward_block_exact(q, scratch);
      stage_out(st.x2, run.b.o, p.L);
    }
  }
  _mm_sfence();  // streaming stores are visible before the caller's threads join
}

template <typename T>
void backward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t K = p.K;
  const int64_t bb = aib_block_scratch_bytes(p.L, K, N, sizeof(T), true);
  Staging<T> st = staging_at<T>(static_cast<char*>(scratch) + aib_group_blocks() * bb, p.L, N);
  std::vector<double> glw(static_cast<size_t>(std::max<int64_t>(K, 1) * N));
  FastRun<T> runs[aib_group_blocks()];
  const AIBFastLayout lay = aib_fast_layout(p.L, K, true);
  for (int64_t item = begin; item < end; ++item) {
    const Item g = item_of(item, p.D, p.bidirectional, N);
    const int64_t n = start_item(p, g, st, scratch, bb, runs);
    backward_fast(runs, n, lay);
    for (int64_t k = 0; k < n; ++k) {
      const FastRun<T>& run = runs[k];
      if (needs_exact_path(run)) {
        AIBScanParams<T> q = staged_params(run.b, st);
        stage_in(run.b.a, st.x0, p.L);
        stage_in(run.b.v, st.x1, p.L);
        stage_in(run.b.go, st.x2, p.L);
        q.grad_o = st.x2;
        q.grad_a = st.x0;  // A is read only when the levels are rebuilt, first
        q.grad_v = st.x2;  // grad_o is read only for the output adjoints, before
        q.grad_lw = glw.data();
        backward_block_exact(q, scratch);
        stage_out(st.x0, run.b.ga, p.L);
        stage_out(st.x2, run.b.gv, p.L);
      } else {
        for (int64_t j = 0; j < K; ++j)
          for (int64_t c = 0; c < N; ++c) glw[static_cast<size_t>(j * N + c)] = run.gacc[j][c];
      }
      const int64_t c0 = g.c0 + k * N;
      for (int64_t j = 0; j < K; ++j)
        for (int64_t c = 0; c < run.b.a.n; ++c)
          p.grad_lw[(g.b * K + j) * p.D + c0 + c] = glw[static_cast<size_t>(j * N + c)];
    }
  }
  _mm_sfence();
}

// The entry points aib_scan_kernel.cpp dispatches to, for this instruction set.
template void forward_items<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void forward_items<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);
template void backward_items<float>(const AIBScanParams<float>&, int64_t, int64_t, void*);
template void backward_items<double>(const AIBScanParams<double>&, int64_t, int64_t, void*);

}  // namespace seqmix::ops::cpu::SEQMIX_ISA
