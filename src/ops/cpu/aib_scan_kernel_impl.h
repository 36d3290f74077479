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

template <typename T>
FastSetup<T> fast_setup(const AIBScanParams<T>& p, bool with_grad) {
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
  V<T> amax = splat<T>(-std::numeric_limits<T>::max()), amin = -amax, vmax{}, gmax{};
  for (int64_t q = 0; q < L; ++q) {
    if (p.mask && !p.mask[q]) continue;
    const V<T> a = load(p.a + q * N, N), v = load(p.v + q * N, N);
    amax = a > amax ? a : amax;
    amin = a < amin ? a : amin;
    const V<T> av = v < splat<T>(0) ? -v : v;
    vmax = av > vmax ? av : vmax;
    if (with_grad) {
      const V<T> g = load(p.grad_o + q * N, N);
      const V<T> ag = g < splat<T>(0) ? -g : g;
      gmax = ag > gmax ? ag : gmax;
    }
  }
  constexpr double log2e = 1.4426950408889634;
  for (int c = 0; c < N; ++c) {
    if (amax[c] == -std::numeric_limits<T>::max()) amax[c] = amin[c] = 0;
    // a_d <= prod_j max(1, W_j) and E <= 1, so |H|, U <= L a_max max|V|. O is unchanged by
    // a constant factor on E, so when that bound gets near the float range, E is scaled
    // down by 2^shift instead of giving up (u_range_ok still guards the small end).
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

// After the levels: every live U must be above 2^kTinyExp, or too much precision is gone.
template <typename T>
inline bool u_range_ok(const AIBScanParams<T>& p, const V<T>* u) {
  const V<T> tiny = splat<T>(std::ldexp(T(1), Traits<T>::kTinyExp));
  for (int64_t q = 0; q < p.L; ++q) {
    if (p.mask && !p.mask[q]) continue;
    const auto low = u[q] < tiny;
    for (int c = 0; c < Traits<T>::N; ++c)
      if (low[c]) return false;
  }
  return true;
}

template <typename T>
inline void fast_level0(const AIBScanParams<T>& p, const FastSetup<T>& f, V<T>* h, V<T>* u) {
  constexpr int64_t N = Traits<T>::N;
  for (int64_t q = 0; q < p.L; ++q) {
    if (p.mask && !p.mask[q]) {
      h[q] = V<T>{};
      u[q] = V<T>{};
      continue;
    }
    V<T> m;
    I<T> k;
    exp_split<T>(load(p.a + q * N, N) - f.amax, m, k);
    const V<T> e = m * pow2_nonpos<T>(k);  // k <= 0: E <= 1
    h[q] = e * load(p.v + q * N, N);
    u[q] = e;
  }
}

template <typename T>
bool forward_block_fast(const AIBScanParams<T>& p, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t L = p.L;
  const FastSetup<T> f = fast_setup(p, false);
  if (!f.ok) return false;
  V<T>* h = static_cast<V<T>*>(scratch);
  V<T>* u = h + L;
  fast_level0(p, f, h, u);
  for (int64_t j = 0; j < p.K; ++j) {
    const int64_t s = int64_t{1} << j;
    const V<T> w = f.W[j];
    for (int64_t q = L - 1; q >= s; --q) {  // descending: [q - s] is still the previous level
      h[q] += w * h[q - s];
      u[q] += w * u[q - s];
    }
  }
  if (!u_range_ok(p, u)) return false;
  for (int64_t q = 0; q < L; ++q) {
    const bool valid = !p.mask || p.mask[q];
    V<T> o = h[q] / u[q];
    o = u[q] > splat<T>(0) ? o : V<T>{};
    store(p.o + q * N, valid ? o : V<T>{}, N);
  }
  return true;
}

template <typename T>
bool backward_block_fast(const AIBScanParams<T>& p, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t L = p.L, K = p.K;
  const FastSetup<T> f = fast_setup(p, true);
  if (!f.ok) return false;
  // Snapshot j (the state before level j): h at [2 j L], u at [(2 j + 1) L]; adjoints after.
  V<T>* base = static_cast<V<T>*>(scratch);
  auto H = [&](int64_t j) { return base + 2 * j * L; };
  auto U = [&](int64_t j) { return base + (2 * j + 1) * L; };
  V<T>* r = base + 2 * (K + 1) * L;  // dL/dH
  V<T>* k = r + L;                   // dL/dU
  fast_level0(p, f, H(0), U(0));
  for (int64_t j = 0; j < K; ++j) {
    const int64_t s = int64_t{1} << j;
    const V<T> w = f.W[j];
    const V<T>*xh = H(j), *xu = U(j);
    V<T>*yh = H(j + 1), *yu = U(j + 1);
    std::memcpy(yh, xh, sizeof(V<T>) * static_cast<size_t>(s));
    std::memcpy(yu, xu, sizeof(V<T>) * static_cast<size_t>(s));
    for (int64_t q = s; q < L; ++q) {
      yh[q] = xh[q] + w * xh[q - s];
      yu[q] = xu[q] + w * xu[q - s];
    }
  }
  const V<T>*fh = H(K), *fu = U(K);
  if (!u_range_ok(p, fu)) return false;
  for (int64_t q = 0; q < L; ++q) {
    const bool valid = !p.mask || p.mask[q];
    const auto live = fu[q] > splat<T>(0);
    const V<T> g = valid ? load(p.grad_o + q * N, N) : V<T>{};
    const V<T> inv = splat<T>(1) / fu[q];
    r[q] = live ? g * inv : V<T>{};
    k[q] = live ? -g * fh[q] * inv * inv : V<T>{};
  }
  for (int64_t j = K - 1; j >= 0; --j) {
    const int64_t s = int64_t{1} << j;
    const V<T> w = f.W[j];
    const V<T>*xh = H(j), *xu = U(j);
    // One ascending pass: the weight gradient reads r[q], k[q] before this level updates
    // them, and the update reads [q + s], which this level has not reached yet. The ranges
    // are split so the loops carry no branch; partial sums go to double every 64 positions.
    VD<T> acc{};
    auto update = [&](int64_t q) {
      r[q] += w * r[q + s];
      k[q] += w * k[q + s];
    };
    auto both = [&](int64_t a, int64_t b, bool upd) {
      for (int64_t q0 = a; q0 < b; q0 += 64) {
        V<T> part{};
        const int64_t q1 = std::min(b, q0 + 64);
        if (upd) {
          for (int64_t q = q0; q < q1; ++q) {
            part += r[q] * (xh[q - s] * w) + k[q] * (xu[q - s] * w);
            update(q);
          }
        } else {
          for (int64_t q = q0; q < q1; ++q) part += r[q] * (xh[q - s] * w) + k[q] * (xu[q - s] * w);
        }
        acc += __builtin_convertvector(part, VD<T>);
      }
    };
    const int64_t split = std::max<int64_t>(s, L - s);
    for (int64_t q = 0; q < std::min(s, L - s); ++q) update(q);  // no gradient term yet
    both(s, L - s, true);                                        // empty unless 2 s < L
    both(split, L, false);                                       // no update any more
    for (int c = 0; c < N; ++c) p.grad_lw[j * N + c] = acc[c];
  }
  const V<T>* e0 = U(0);
  for (int64_t q = 0; q < L; ++q) {
    const bool valid = !p.mask || p.mask[q];
    const V<T> v = load(p.v + q * N, N);
    store(p.grad_v + q * N, valid ? r[q] * e0[q] : V<T>{}, N);
    store(p.grad_a + q * N, valid ? e0[q] * (k[q] + v * r[q]) : V<T>{}, N);
  }
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

// src [B, L, D] rows of group g -> dst [nblk][L][N] (zero-padded lanes), in scan order.
template <typename T>
void stage_in(const T* src, T* dst, const Group& g, int64_t L, int64_t D, int64_t N) {
  for (int64_t i = 0; i < L; ++i) {
    const T* row = src + (g.b * L + i) * D + g.c0;
    const int64_t q = g.rev ? L - 1 - i : i;
    for (int64_t k = 0; k < g.nblk; ++k) {
      const int64_t n = std::min<int64_t>(N, g.nc - k * N);
      store(dst + (k * L + q) * N, load(row + k * N, n), N);
    }
  }
}

template <typename T>
void stage_out(const T* src, T* dst, const Group& g, int64_t L, int64_t D, int64_t N) {
  for (int64_t i = 0; i < L; ++i) {
    T* row = dst + (g.b * L + i) * D + g.c0;
    const int64_t q = g.rev ? L - 1 - i : i;
    for (int64_t k = 0; k < g.nblk; ++k)
      store(row + k * N, load(src + (k * L + q) * N, N), std::min<int64_t>(N, g.nc - k * N));
  }
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

template <typename T>
void forward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t G = aib_group_blocks(), L = p.L;
  void* block_scratch = scratch;
  Staging<T> st = staging_at<T>(
      static_cast<char*>(scratch) + aib_block_scratch_bytes(L, p.K, N, sizeof(T), false), L, p.K, N,
      G);
  for (int64_t item = begin; item < end; ++item) {
    const Group g = group_of(item, p.D, p.bidirectional, N, G);
    stage_common(p, g, st, N);
    stage_in(p.a, st.x0, g, L, p.D, N);
    stage_in(p.v, st.x1, g, L, p.D, N);
    for (int64_t k = 0; k < g.nblk; ++k) {
      AIBScanParams<T> q = block_params(p, st, k, N);
      q.a = st.x0 + k * L * N;
      q.v = st.x1 + k * L * N;
      q.o = st.x0 + k * L * N;  // A is read in full before O is written
      if (aib_exact_path_forced() || !forward_block_fast(q, block_scratch))
        forward_block_exact(q, block_scratch);
    }
    stage_out(st.x0, p.o, g, L, p.D, N);
  }
}

template <typename T>
void backward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  constexpr int64_t N = Traits<T>::N;
  const int64_t G = aib_group_blocks(), L = p.L, K = p.K;
  void* block_scratch = scratch;
  Staging<T> st = staging_at<T>(
      static_cast<char*>(scratch) + aib_block_scratch_bytes(L, K, N, sizeof(T), true), L, K, N, G);
  std::vector<double> glw(static_cast<size_t>(G * std::max<int64_t>(K, 1) * N));
  for (int64_t item = begin; item < end; ++item) {
    const Group g = group_of(item, p.D, p.bidirectional, N, G);
    stage_common(p, g, st, N);
    stage_in(p.a, st.x0, g, L, p.D, N);
    stage_in(p.v, st.x1, g, L, p.D, N);
    stage_in(p.grad_o, st.x2, g, L, p.D, N);
    for (int64_t k = 0; k < g.nblk; ++k) {
      AIBScanParams<T> q = block_params(p, st, k, N);
      q.a = st.x0 + k * L * N;
      q.v = st.x1 + k * L * N;
      q.grad_o = st.x2 + k * L * N;
      q.grad_a = st.x0 + k * L * N;  // A is read only when the levels are rebuilt, first
      q.grad_v = st.x2 + k * L * N;  // grad_o is read only for the output adjoints, before
      q.grad_lw = glw.data() + k * K * N;
      if (aib_exact_path_forced() || !backward_block_fast(q, block_scratch))
        backward_block_exact(q, block_scratch);
    }
    stage_out(st.x0, p.grad_a, g, L, p.D, N);
    stage_out(st.x2, p.grad_v, g, L, p.D, N);
    for (int64_t k = 0; k < g.nblk; ++k)
      for (int64_t j = 0; j < K; ++j)
        for (int64_t c = 0; c < std::min<int64_t>(N, g.nc - k * N); ++c)
          p.grad_lw[(g.b * K + j) * p.D + g.c0 + k * N + c] =
              glw[static_cast<size_t>((k * K + j) * N + c)];
  }
}

}  // namespace seqmix::ops::cpu::SEQMIX_ISA
