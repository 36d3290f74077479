// Implementation of the fused AIB scan kernels, compiled once per instruction set: the
// including file defines SEQMIX_ISA (a namespace name) and is built with that ISA's flags.
// Plain C++ with GCC vector extensions (one 64-byte vector = one channel block), so the same
// source becomes AVX-512 or SSE2 code. No LibTorch headers: this file compiles in a second.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <immintrin.h>

#include "aib_scan_kernel.h"

#ifndef SEQMIX_ISA
#error "define SEQMIX_ISA before including aib_scan_kernel_impl.h"
#endif

namespace seqmix::ops::cpu::SEQMIX_ISA {

template <typename T>
struct Traits;

template <>
struct Traits<float> {
  typedef float V __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
  typedef double VD __attribute__((vector_size(128)));
  static constexpr int N = 16;
  static constexpr int32_t kBias = 127;  // 2^-127 has all-zero bits: +0.0
  static constexpr int kMantBits = 23;
  static constexpr int kSafeExp = 100;     // fast path: every sum stays below 2^kSafeExp
  static constexpr int kTinyExp = -60;     // fast path: every live U stays above 2^kTinyExp
  static constexpr float kMaxT = 1 << 20;  // |A log2 e| clamp before the integer conversion
};

template <>
struct Traits<double> {
  typedef double V __attribute__((vector_size(64)));
  typedef int64_t I __attribute__((vector_size(64)));
  typedef double VD __attribute__((vector_size(64)));
  static constexpr int N = 8;
  static constexpr int64_t kBias = 1023;
  static constexpr int kMantBits = 52;
  static constexpr int kSafeExp = 1000;
  static constexpr int kTinyExp = -900;
  static constexpr double kMaxT = 1 << 20;
};

// Exponent of "nothing here": far below any real exponent (|A log2 e| is clamped to 2^20),
// far enough from the integer limit that adding K level exponents cannot wrap.
constexpr int64_t kSentinel = -(int64_t{1} << 28);

template <typename T>
using V = typename Traits<T>::V;
template <typename T>
using I = typename Traits<T>::I;
template <typename T>
using VD = typename Traits<T>::VD;
template <typename T>
using Ie = std::conditional_t<std::is_same_v<T, float>, int32_t, int64_t>;

template <typename T>
inline V<T> splat(T x) {
  return V<T>{} + x;
}

template <typename T>
inline I<T> isplat(int64_t x) {
  return I<T>{} + static_cast<Ie<T>>(x);
}

// 2^k for integer lanes k <= bias (k <= -bias gives +0.0): exponent-field construction.
template <typename T>
inline V<T> pow2_nonpos(I<T> k) {
  const I<T> lo = isplat<T>(-Traits<T>::kBias);
  k = k < lo ? lo : k;
  return reinterpret_cast<V<T>>((k + isplat<T>(Traits<T>::kBias)) << Traits<T>::kMantBits);
}

// 2^k for integer lanes clamped to [-bias, bias] (finite, possibly 0).
template <typename T>
inline V<T> pow2_clamped(I<T> k) {
  const I<T> hi = isplat<T>(Traits<T>::kBias);
  k = k > hi ? hi : k;
  return pow2_nonpos<T>(k);
}

// m * 2^k applied in two halves, so that any result in the representable range is reached
// even when m is tiny or huge.
template <typename T>
inline V<T> scale(V<T> m, I<T> k) {
  const I<T> lim = isplat<T>(2 * Traits<T>::kBias);
  k = k > lim ? lim : k;
  k = k < -lim ? -lim : k;
  const I<T> k1 = k >> 1;
  return m * pow2_clamped<T>(k1) * pow2_clamped<T>(k - k1);
}

// exp(x) = m * 2^k with m in [0.7, 1.42]: the exponent is kept apart, so nothing overflows.
// k = round(x log2 e); m = exp(f ln 2) for |f| <= 1/2 by a polynomial (Cephes expf's for
// float, ~1 ulp; a 14-term Taylor series for double, error < 1e-17).
template <typename T>
inline void exp_split(V<T> x, V<T>& m, I<T>& k) {
  constexpr T log2e = static_cast<T>(1.4426950408889634073599);
  constexpr T ln2 = static_cast<T>(0.6931471805599453094172);
  V<T> t = x * log2e;
  const V<T> hi = splat<T>(Traits<T>::kMaxT);
  t = t > hi ? hi : t;
  t = t < -hi ? -hi : t;
  k = __builtin_convertvector(t + (t >= splat<T>(0) ? splat<T>(T(0.5)) : splat<T>(T(-0.5))), I<T>);
  const V<T> f = (t - __builtin_convertvector(k, V<T>)) * ln2;  // |f| <= ln2 / 2
  if constexpr (std::is_same_v<T, float>) {
    V<T> p = splat<T>(1.9875691500e-4f);
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    m = splat<T>(1) + f + f * f * p;
  } else {
    V<T> r = splat<T>(1);
    for (int n = 14; n >= 1; --n) r = splat<T>(1) + f * r * (T(1) / T(n));
    m = r;
  }
}

// Loads/stores n <= N lanes; the full-width case has a constant size, so it compiles to one
// unaligned vector move instead of a memcpy call.
template <typename T>
inline V<T> load(const T* p, int64_t n) {
  V<T> x{};
  if (n == Traits<T>::N)
    std::memcpy(&x, p, sizeof(V<T>));
  else
    std::memcpy(&x, p, sizeof(T) * static_cast<size_t>(n));
  return x;
}

template <typename T>
inline void store(T* p, V<T> x, int64_t n) {
  if (n == Traits<T>::N)
    std::memcpy(p, &x, sizeof(V<T>));
  else
    std::memcpy(p, &x, sizeof(T) * static_cast<size_t>(n));
}

// x_a <- x_a + W * x_b with W = wm * 2^we, all in the shared-exponent representation.
template <typename T>
inline void combine(V<T>& ha, V<T>& ua, I<T>& ea, V<T> hb, V<T> ub, I<T> eb, V<T> wm, I<T> we) {
  const I<T> eb2 = eb + we;
  const I<T> e = ea > eb2 ? ea : eb2;
  const V<T> fa = pow2_nonpos<T>(ea - e);
  const V<T> fb = pow2_nonpos<T>(eb2 - e) * wm;
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

// ---- Fast path: plain floating point, E = exp(A - max A - shift). Same arithmetic as the
// exponent path, valid when (checked up front, fast_setup) the bound on every sum, after E is
// scaled down by 2^shift, and in backward the bound on every adjoint stay below 2^kSafeExp,
// and (checked after the levels, u_range_ok) no live U fell below 2^kTinyExp. Otherwise the
// block reruns on the exponent path. Dense [1, L, N] problems only (a staged block).

template <typename T>
struct FastSetup {
  V<T> W[64];  // plain distance weights per level
  V<T> amax;   // max A over valid positions (0 for lanes with none)
  bool ok = true;
};

// Per block, over valid positions: max and min of A, max |V| and max |dL/dO|; gathered
// while the group is staged (stage_in), so the bounds cost no pass of their own.
template <typename T>
struct BlockStats {
  V<T> amax, amin, vmax, gmax;
  void reset() {
    amax = splat<T>(-std::numeric_limits<T>::max());
    amin = -amax;
    vmax = V<T>{};
    gmax = V<T>{};
  }
};

template <typename T>
FastSetup<T> fast_setup(const AIBScanParams<T>& p, const BlockStats<T>& st, bool with_grad) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t L = p.L;
  FastSetup<T> f;
  V<T> pos{};
  for (int64_t j = 0; j < p.K; ++j) {
    const V<T> lw = load(p.lw + j * N, N);
    V<T> m;
    I<T> k;
    exp_split<T>(lw, m, k);
    f.W[j] = scale<T>(m, k);
    pos += lw > splat<T>(0) ? lw : V<T>{};
  }
  V<T> amax = st.amax, amin = st.amin;
  const V<T> vmax = st.vmax, gmax = st.gmax;
  constexpr double log2e = 1.4426950408889634;
  for (int c = 0; c < N; ++c) {
    if (amax[c] == -std::numeric_limits<T>::max()) amax[c] = amin[c] = 0;
    // a_d <= prod_j max(1, W_j) and E <= 1, so |H|, U <= L a_max max|V|. O is unchanged by
    // a constant factor on E, so when that bound gets near the float range, E is scaled
    // down by 2^shift instead of giving up (the U check where U is final guards the
    // small end).
    const double sums = static_cast<double>(pos[c]) * log2e +
                        std::log2(static_cast<double>(L) + 1) +
                        std::log2(static_cast<double>(vmax[c]) + 1);
    const double shift = std::max(0.0, sums - (Traits<T>::kSafeExp - 20));
    // Adjoints: a_{i-j} / U_i <= 1 / E_j, so |dL/dH_j| <= L max|dO| / min E.
    const double adjoints = std::log2(static_cast<double>(L) + 1) +
                            std::log2(static_cast<double>(gmax[c]) + 1) +
                            static_cast<double>(amax[c] - amin[c]) * log2e + shift;
    amax[c] += static_cast<T>(shift / log2e);
    if ((with_grad && !(adjoints < Traits<T>::kSafeExp)) ||
        !std::isfinite(static_cast<double>(amax[c])))
      f.ok = false;
  }
  f.amax = amax;
  return f;
}

// Where a block's results go: position q (scan order) at p + q * step, n valid lanes. The
// fast path writes results straight into the caller's [B, L, D] tensors (step = +-D) with
// streaming stores: full cache lines that are not read back here, so no read-for-ownership
// and no copy through the staging area.
template <typename T>
struct Dest {
  T* p;
  int64_t step, n;
};

template <typename T>
inline void put(const Dest<T>& d, int64_t q, V<T> x) {
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

// The lower bound on every live U, checked where U is final.
template <typename T>
inline V<T> fast_tiny() {
  return splat<T>(std::ldexp(T(1), Traits<T>::kTinyExp));
}

template <typename T>
inline bool any_lane(I<T> x) {
  for (int c = 0; c < Traits<T>::N; ++c)
    if (x[c]) return true;
  return false;
}

// x^0 = (E V, E) for positions [t0, t0 + n): zero past L and at masked positions.
template <typename T>
inline void fast_x0(const AIBScanParams<T>& p, const FastSetup<T>& f, int64_t t0, int64_t n,
                    V<T>* h, V<T>* u) {
  constexpr int64_t N = Traits<T>::N;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t q = t0 + i;
    if (q >= p.L || (p.mask && !p.mask[q])) {
      h[i] = V<T>{};
      u[i] = V<T>{};
      continue;
    }
    V<T> m;
    I<T> k;
    exp_split<T>(load(p.a + q * N, N) - f.amax, m, k);
    const V<T> e = m * pow2_nonpos<T>(k);  // k <= 0: E <= 1
    h[i] = e * load(p.v + q * N, N);
    u[i] = e;
  }
}

// Levels 0 .. m - 1 on one tile of T = 2^m positions. Carries: level j's 2^j values at
// offset 2^j - 1 of a [T] area (h then u areas, T apart). `in` is the previous tile's (null
// for the first tile), `out` receives this tile's (null if not needed); `snap`, if given,
// receives the state before each level j at [2 j T] (h) and [(2 j + 1) T] (u).
template <typename T>
inline void fast_tile_levels(const FastSetup<T>& f, int64_t m, V<T>* h, V<T>* u, const V<T>* in,
                             V<T>* out, V<T>* snap) {
  const int64_t Tn = int64_t{1} << m;
  for (int64_t j = 0; j < m; ++j) {
    const int64_t s = int64_t{1} << j, off = s - 1;
    const V<T> w = f.W[j];
    if (snap) {
      std::memcpy(snap + 2 * j * Tn, h, sizeof(V<T>) * static_cast<size_t>(Tn));
      std::memcpy(snap + (2 * j + 1) * Tn, u, sizeof(V<T>) * static_cast<size_t>(Tn));
    }
    if (out) {
      std::memcpy(out + off, h + Tn - s, sizeof(V<T>) * static_cast<size_t>(s));
      std::memcpy(out + Tn + off, u + Tn - s, sizeof(V<T>) * static_cast<size_t>(s));
    }
    for (int64_t q = Tn - 1; q >= s; --q) {  // descending: [q - s] is still level j
      h[q] += w * h[q - s];
      u[q] += w * u[q - s];
    }
    if (in) {
      for (int64_t q = 0; q < s; ++q) {  // position q - s of the previous tile
        h[q] += w * in[off + q];
        u[q] += w * in[Tn + off + q];
      }
    }
  }
}

// The carries tile t leaves for tile t + 1: every tile's in the backward layout (the
// backward recompute reads them again), two alternating slots in the forward one.
template <typename T>
inline V<T>* carry_slot(const AIBFastLayout& lay, V<T>* base, int64_t t) {
  return base + lay.carry + 2 * lay.T * (lay.backward ? t : (t & 1));
}

// Phase 1 of both passes: the state [Lp] (h, then u at +Lp) after the tile levels.
template <typename T>
void fast_phase1(const AIBScanParams<T>& p, const FastSetup<T>& f, const AIBFastLayout& lay,
                 V<T>* base) {
  V<T>* h = base + lay.state;
  for (int64_t t = 0; t < lay.R; ++t) {
    const int64_t t0 = t * lay.T;
    fast_x0(p, f, t0, lay.T, h + t0, h + lay.Lp + t0);
    fast_tile_levels<T>(f, lay.m, h + t0, h + lay.Lp + t0,
                        t > 0 ? carry_slot<T>(lay, base, t - 1) : nullptr,
                        t + 1 < lay.R ? carry_slot<T>(lay, base, t) : nullptr, nullptr);
  }
}

template <typename T>
bool forward_block_fast(const AIBScanParams<T>& p, const BlockStats<T>& stats, const Dest<T>& out,
                        void* scratch) {
  const FastSetup<T> f = fast_setup(p, stats, false);
  if (!f.ok) return false;
  const AIBFastLayout lay = aib_fast_layout(p.L, p.K, false);
  V<T>* base = static_cast<V<T>*>(scratch);
  fast_phase1(p, f, lay, base);
  const V<T>*sh = base + lay.state, *su = sh + lay.Lp;
  V<T>*bh = base + lay.chunk, *bu = bh + lay.R * lay.C;
  const V<T> tiny = fast_tiny<T>();
  I<T> bad{};
  for (int64_t c0 = 0; c0 < lay.T; c0 += lay.C) {
    const int64_t nc = std::min(lay.C, lay.T - c0);
    for (int64_t r = 0; r < lay.R; ++r)
      for (int64_t c = 0; c < nc; ++c) {
        bh[r * nc + c] = sh[r * lay.T + c0 + c];
        bu[r * nc + c] = su[r * lay.T + c0 + c];
      }
    for (int64_t i = 0; i < lay.nh; ++i) {
      const int64_t rs = int64_t{1} << i;
      const V<T> w = f.W[lay.m + i];
      for (int64_t r = lay.R - 1; r >= rs; --r)
        for (int64_t c = 0; c < nc; ++c) {
          bh[r * nc + c] += w * bh[(r - rs) * nc + c];
          bu[r * nc + c] += w * bu[(r - rs) * nc + c];
        }
    }
    for (int64_t r = 0; r < lay.R; ++r)
      for (int64_t c = 0; c < nc; ++c) {
        const int64_t q = r * lay.T + c0 + c;
        if (q >= p.L) break;
        const V<T> u = bu[r * nc + c];
        if (p.mask && !p.mask[q]) {
          put(out, q, V<T>{});
          continue;
        }
        bad |= u < tiny;
        V<T> o = bh[r * nc + c] / u;
        put(out, q, u > splat<T>(0) ? o : V<T>{});
      }
  }
  return !any_lane<T>(bad);
}

template <typename T>
bool backward_block_fast(const AIBScanParams<T>& p, const BlockStats<T>& stats,
                         const Dest<T>& out_ga, const Dest<T>& out_gv, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const FastSetup<T> f = fast_setup(p, stats, true);
  if (!f.ok) return false;
  const AIBFastLayout lay = aib_fast_layout(p.L, p.K, true);
  const int64_t R = lay.R, Tn = lay.T, m = lay.m, nh = lay.nh, Lp = lay.Lp;
  V<T>* base = static_cast<V<T>*>(scratch);
  fast_phase1(p, f, lay, base);
  V<T>*sh = base + lay.state, *su = sh + Lp;
  VD<T> gacc[64] = {};
  const V<T> tiny = fast_tiny<T>();
  I<T> bad{};
  // Phase 2: per chunk, snapshot i (state before column level i) at [2 i R nc] (h) and
  // [(2 i + 1) R nc] (u), i = 0 .. nh; the adjoints after them. The adjoints of the tile
  // levels' output replace the state in place.
  V<T>* chunk = base + lay.chunk;
  for (int64_t c0 = 0; c0 < Tn; c0 += lay.C) {
    const int64_t nc = std::min(lay.C, Tn - c0), n = R * nc;
    auto S = [&](int64_t i) { return chunk + 2 * i * n; };
    V<T>*ah = chunk + 2 * (nh + 1) * n, *au = ah + n;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < nc; ++c) {
        S(0)[r * nc + c] = sh[r * Tn + c0 + c];
        S(0)[n + r * nc + c] = su[r * Tn + c0 + c];
      }
    for (int64_t i = 0; i < nh; ++i) {
      const int64_t rs = int64_t{1} << i;
      const V<T> w = f.W[m + i];
      const V<T>* x = S(i);
      V<T>* y = S(i + 1);
      std::memcpy(y, x, sizeof(V<T>) * static_cast<size_t>(rs * nc));
      std::memcpy(y + n, x + n, sizeof(V<T>) * static_cast<size_t>(rs * nc));
      for (int64_t k = rs * nc; k < n; ++k) {
        y[k] = x[k] + w * x[k - rs * nc];
        y[n + k] = x[n + k] + w * x[n + k - rs * nc];
      }
    }
    // Output adjoints: dL/dH = g / U, dL/dU = -g H / U^2.
    const V<T>*fh = S(nh), *fu = fh + n;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < nc; ++c) {
        const int64_t q = r * Tn + c0 + c, k = r * nc + c;
        const bool valid = q < p.L && (!p.mask || p.mask[q]);
        if (valid) bad |= fu[k] < tiny;
        const V<T> g = valid ? load(p.grad_o + q * N, N) : V<T>{};
        const V<T> inv = splat<T>(1) / fu[k];
        const auto live = fu[k] > splat<T>(0);
        ah[k] = live ? g * inv : V<T>{};
        au[k] = live ? -g * fh[k] * inv * inv : V<T>{};
      }
    // Transposed column levels, last first. Each ascending pass reads the adjoint at [k]
    // for the weight gradient before updating it, and [k + shift], not yet updated.
    for (int64_t i = nh - 1; i >= 0; --i) {
      const int64_t d = (int64_t{1} << i) * nc;
      const V<T> w = f.W[m + i];
      const V<T>* x = S(i);
      V<T> part{};
      for (int64_t k = 0; k < n; ++k) {
        if (k >= d) part += ah[k] * (x[k - d] * w) + au[k] * (x[n + k - d] * w);
        if (k + d < n) {
          ah[k] += w * ah[k + d];
          au[k] += w * au[k + d];
        }
      }
      gacc[m + i] += __builtin_convertvector(part, VD<T>);
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < nc; ++c) {
        sh[r * Tn + c0 + c] = ah[r * nc + c];
        su[r * Tn + c0 + c] = au[r * nc + c];
      }
  }
  if (any_lane<T>(bad)) return false;  // nothing written outside the scratch yet
  // Phase 1 backward, last tile first: recompute the tile's levels (snapshots), then the
  // transposed tile levels on the adjoints; carries of the next tile's adjoints at
  // rcarry[cur], this tile's for the previous one at rcarry[1 - cur].
  V<T>* snap = base + lay.tile;  // m snapshots, then the working tile
  V<T>* work = snap + 2 * m * Tn;
  V<T>* rc[2] = {base + lay.rcarry, base + lay.rcarry + 2 * Tn};
  int cur = 0;
  for (int64_t t = R - 1; t >= 0; --t) {
    const int64_t t0 = t * Tn;
    const V<T>* cin = t > 0 ? carry_slot<T>(lay, base, t - 1) : nullptr;
    fast_x0(p, f, t0, Tn, work, work + Tn);
    fast_tile_levels<T>(f, m, work, work + Tn, cin, nullptr, snap);
    V<T>*ah = sh + t0, *au = su + t0;
    const V<T>* rin = t + 1 < R ? rc[cur] : nullptr;
    V<T>* rout = t > 0 ? rc[1 - cur] : nullptr;
    for (int64_t j = m - 1; j >= 0; --j) {
      const int64_t s = int64_t{1} << j, off = s - 1;
      const V<T> w = f.W[j];
      const V<T>*xh = snap + 2 * j * Tn, *xu = xh + Tn;
      if (rout) {
        std::memcpy(rout + off, ah, sizeof(V<T>) * static_cast<size_t>(s));
        std::memcpy(rout + Tn + off, au, sizeof(V<T>) * static_cast<size_t>(s));
      }
      V<T> part{};
      // q < s: the gradient term reads the previous tile (its carry); s <= T / 2, so the
      // update still reads this tile.
      for (int64_t q = 0; q < s; ++q) {
        if (cin) part += ah[q] * (cin[off + q] * w) + au[q] * (cin[Tn + off + q] * w);
        ah[q] += w * ah[q + s];
        au[q] += w * au[q + s];
      }
      for (int64_t q = s; q < Tn - s; ++q) {
        part += ah[q] * (xh[q - s] * w) + au[q] * (xu[q - s] * w);
        ah[q] += w * ah[q + s];
        au[q] += w * au[q + s];
      }
      // q >= T - s: the update reads the next tile's adjoints (before its level j).
      for (int64_t q = std::max(s, Tn - s); q < Tn; ++q) {
        part += ah[q] * (xh[q - s] * w) + au[q] * (xu[q - s] * w);
        if (rin) {
          ah[q] += w * rin[off + q + s - Tn];
          au[q] += w * rin[Tn + off + q + s - Tn];
        }
      }
      gacc[j] += __builtin_convertvector(part, VD<T>);
    }
    // dV = E dL/dH, dA = E (dL/dU + V dL/dH), E from snapshot 0.
    const V<T>* e0 = snap + Tn;
    for (int64_t q = 0; q < Tn && t0 + q < p.L; ++q) {
      const int64_t pos = t0 + q;
      const bool valid = !p.mask || p.mask[pos];
      const V<T> v = load(p.v + pos * N, N);
      put(out_gv, pos, valid ? ah[q] * e0[q] : V<T>{});
      put(out_ga, pos, valid ? e0[q] * (au[q] + v * ah[q]) : V<T>{});
    }
    cur = 1 - cur;
  }
  for (int64_t j = 0; j < p.K; ++j)
    for (int c = 0; c < N; ++c) p.grad_lw[j * N + c] = gacc[j][c];
  return true;
}

// ---- Channel groups. A channel block of one sequence is one cache line per position, D
// elements apart, and reading it straight from [B, L, D] is latency-bound (measured: more
// time than all the levels). So a work item is a group of up to aib_group_blocks() blocks:
// its rows are copied in contiguous runs into a [blocks][L][N] staging area (reversed for
// the suffix half, so the blocks below only ever see the causal form), every block runs on
// its staged copy as a dense [1, L, N] problem, and results are copied back the same way.

struct Group {
  int64_t b, c0, nc, nblk;
  bool rev;
};

inline Group group_of(int64_t item, int64_t D, bool bidir, int64_t N, int64_t G) {
  const int64_t halves = bidir ? 2 : 1, hd = D / halves;
  const int64_t span = N * G, ng = (hd + span - 1) / span;
  Group g;
  g.b = item / (halves * ng);
  const int64_t r = item % (halves * ng);
  const int64_t half = r / ng, grp = r % ng;
  g.c0 = half * hd + grp * span;
  g.nc = std::min<int64_t>(span, hd - grp * span);
  g.nblk = (g.nc + N - 1) / N;
  g.rev = half == 1;
  return g;
}

// src [B, L, D] rows of group g -> dst [nblk][L][N] (zero-padded lanes), in scan order,
// folding each block's statistics over valid positions (mask in scan order) into `stats`:
// A's max and min, or the max magnitude into `absmax` (a member of BlockStats), or none.
enum class Stat { none, minmax, vabs, gabs };

template <typename T>
void stage_in(const T* src, T* dst, const Group& g, int64_t L, int64_t D, int64_t N,
              const uint8_t* mask, Stat stat, BlockStats<T>* stats) {
  for (int64_t i = 0; i < L; ++i) {
    const T* row = src + (g.b * L + i) * D + g.c0;
    const int64_t q = g.rev ? L - 1 - i : i;
    const bool valid = mask[q] != 0;
    for (int64_t k = 0; k < g.nblk; ++k) {
      const V<T> x = load(row + k * N, std::min<int64_t>(N, g.nc - k * N));
      store(dst + (k * L + q) * N, x, N);
      if (!valid || stat == Stat::none) continue;
      BlockStats<T>& b = stats[k];
      if (stat == Stat::minmax) {
        b.amax = x > b.amax ? x : b.amax;
        b.amin = x < b.amin ? x : b.amin;
      } else {
        const V<T> ax = x < splat<T>(0) ? -x : x;
        V<T>& m = stat == Stat::vabs ? b.vmax : b.gmax;
        m = ax > m ? ax : m;
      }
    }
  }
}

// Blocks [k0, k1) of staged src [nblk][L][N] back to rows of dst [B, L, D].
template <typename T>
void stage_out(const T* src, T* dst, const Group& g, int64_t L, int64_t D, int64_t N, int64_t k0,
               int64_t k1) {
  for (int64_t i = 0; i < L; ++i) {
    T* row = dst + (g.b * L + i) * D + g.c0;
    const int64_t q = g.rev ? L - 1 - i : i;
    for (int64_t k = k0; k < k1; ++k)
      store(row + k * N, load(src + (k * L + q) * N, N), std::min<int64_t>(N, g.nc - k * N));
  }
}

// Block k of group g in a [B, L, D] result tensor, addressed in scan order.
template <typename T>
Dest<T> dest_of(T* base, const Group& g, int64_t k, int64_t L, int64_t D, int64_t N) {
  const int64_t row = g.b * L + (g.rev ? L - 1 : 0);
  return {base + row * D + g.c0 + k * N, g.rev ? -D : D, std::min<int64_t>(N, g.nc - k * N)};
}

// Staging layout after the per-block scratch: mask [L], then three [nblk][L][N] arrays and
// two [nblk][K][N] arrays (log weights and their gradients).
template <typename T>
struct Staging {
  uint8_t* mask;
  T *x0, *x1, *x2, *lw, *glw;
};

template <typename T>
Staging<T> staging_at(void* base, int64_t L, int64_t K, int64_t N, int64_t G) {
  Staging<T> st;
  st.mask = static_cast<uint8_t*>(base);
  auto* t = reinterpret_cast<T*>(st.mask + ((L + 63) / 64) * 64);
  const int64_t big = G * L * N, small = G * std::max<int64_t>(K, 1) * N;
  st.x0 = t;
  st.x1 = t + big;
  st.x2 = t + 2 * big;
  st.lw = t + 3 * big;
  st.glw = t + 3 * big + small;
  return st;
}

template <typename T>
void stage_common(const AIBScanParams<T>& p, const Group& g, Staging<T>& st, int64_t N) {
  const int64_t L = p.L;
  for (int64_t i = 0; i < L; ++i) st.mask[g.rev ? L - 1 - i : i] = p.mask ? p.mask[g.b * L + i] : 1;
  for (int64_t k = 0; k < g.nblk; ++k)
    for (int64_t j = 0; j < p.K; ++j)
      store(st.lw + (k * p.K + j) * N,
            load(p.lw + j * p.D + g.c0 + k * N, std::min<int64_t>(N, g.nc - k * N)), N);
}

// The dense [1, L, N] problem of block k of a staged group.
template <typename T>
AIBScanParams<T> block_params(const AIBScanParams<T>& p, const Staging<T>& st, int64_t k,
                              int64_t N) {
  AIBScanParams<T> q;
  q.B = 1;
  q.L = p.L;
  q.D = N;
  q.K = p.K;
  q.bidirectional = false;
  q.mask = st.mask;
  q.lw = st.lw + k * p.K * N;
  return q;
}

// Stages work item g: mask and log weights, then A and V (and dL/dO for the backward) with
// each block's statistics for the fast path's bounds.
template <typename T>
void stage_item(const AIBScanParams<T>& p, const Group& g, Staging<T>& st, BlockStats<T>* stats,
                bool with_grad) {
  constexpr int64_t N = Traits<T>::N;
  stage_common(p, g, st, N);
  for (int64_t k = 0; k < g.nblk; ++k) stats[k].reset();
  stage_in(p.a, st.x0, g, p.L, p.D, N, st.mask, Stat::minmax, stats);
  stage_in(p.v, st.x1, g, p.L, p.D, N, st.mask, Stat::vabs, stats);
  if (with_grad) stage_in(p.grad_o, st.x2, g, p.L, p.D, N, st.mask, Stat::gabs, stats);
}

// True if the block must run on the exponent path: forced, or the fast attempt (made only
// when not forced) gave up, which is counted.
template <typename Attempt>
bool needs_exact_path(Attempt fast_attempt) {
  if (aib_exact_path_forced()) return true;
  if (fast_attempt()) return false;
  aib_count_fallback();
  return true;
}

template <typename T>
void forward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t G = aib_group_blocks(), L = p.L;
  void* block_scratch = scratch;
  Staging<T> st = staging_at<T>(
      static_cast<char*>(scratch) + aib_block_scratch_bytes(L, p.K, N, sizeof(T), false), L, p.K, N,
      G);
  BlockStats<T> stats[aib_group_blocks()];
  for (int64_t item = begin; item < end; ++item) {
    const Group g = group_of(item, p.D, p.bidirectional, N, G);
    stage_item(p, g, st, stats, false);
    for (int64_t k = 0; k < g.nblk; ++k) {
      AIBScanParams<T> q = block_params(p, st, k, N);
      q.a = st.x0 + k * L * N;
      q.v = st.x1 + k * L * N;
      q.o = st.x2 + k * L * N;  // exponent path: staged, then copied out
      if (!needs_exact_path([&] {
            return forward_block_fast(q, stats[k], dest_of(p.o, g, k, L, p.D, N), block_scratch);
          }))
        continue;
      forward_block_exact(q, block_scratch);
      stage_out(st.x2, p.o, g, L, p.D, N, k, k + 1);
    }
  }
  _mm_sfence();  // streaming stores are visible before the caller's threads join
}

template <typename T>
void backward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t G = aib_group_blocks(), L = p.L, K = p.K;
  void* block_scratch = scratch;
  Staging<T> st = staging_at<T>(
      static_cast<char*>(scratch) + aib_block_scratch_bytes(L, K, N, sizeof(T), true), L, K, N, G);
  std::vector<double> glw(static_cast<size_t>(G * std::max<int64_t>(K, 1) * N));
  BlockStats<T> stats[aib_group_blocks()];
  for (int64_t item = begin; item < end; ++item) {
    const Group g = group_of(item, p.D, p.bidirectional, N, G);
    stage_item(p, g, st, stats, true);
    for (int64_t k = 0; k < g.nblk; ++k) {
      AIBScanParams<T> q = block_params(p, st, k, N);
      q.a = st.x0 + k * L * N;
      q.v = st.x1 + k * L * N;
      q.grad_o = st.x2 + k * L * N;
      q.grad_a = st.x0 + k * L * N;  // A is read only when the levels are rebuilt, first
      q.grad_v = st.x2 + k * L * N;  // grad_o is read only for the output adjoints, before
      q.grad_lw = glw.data() + k * K * N;
      if (!needs_exact_path([&] {
            return backward_block_fast(q, stats[k], dest_of(p.grad_a, g, k, L, p.D, N),
                                       dest_of(p.grad_v, g, k, L, p.D, N), block_scratch);
          }))
        continue;
      backward_block_exact(q, block_scratch);
      stage_out(st.x0, p.grad_a, g, L, p.D, N, k, k + 1);
      stage_out(st.x2, p.grad_v, g, L, p.D, N, k, k + 1);
    }
    for (int64_t k = 0; k < g.nblk; ++k)
      for (int64_t j = 0; j < K; ++j)
        for (int64_t c = 0; c < std::min<int64_t>(N, g.nc - k * N); ++c)
          p.grad_lw[(g.b * K + j) * p.D + g.c0 + k * N + c] =
              glw[static_cast<size_t>((k * K + j) * N + c)];
  }
  _mm_sfence();
}

}  // namespace seqmix::ops::cpu::SEQMIX_ISA
