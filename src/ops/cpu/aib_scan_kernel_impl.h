// Implementation of the fused AIB scan kernels, compiled once per instruction set: the
// including file defines SEQMIX_ISA (a namespace name) and is built with that ISA's flags.
// Plain C++ with GCC vector extensions (one 64-byte vector = one channel block), so the same
// source becomes AVX-512 or SSE2 code. No LibTorch headers: this file compiles in a second.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
  static constexpr int kExpTerms = 11;     // Taylor terms of exp on (-ln 2, ln 2): error < 1e-9
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
  static constexpr int kExpTerms = 19;  // error < 1e-19
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

// exp(x) = m * 2^k with m in (1/2, 2): the exponent is kept apart, so nothing overflows.
template <typename T>
inline void exp_split(V<T> x, V<T>& m, I<T>& k) {
  constexpr T log2e = static_cast<T>(1.4426950408889634073599);
  constexpr T ln2 = static_cast<T>(0.6931471805599453094172);
  V<T> t = x * log2e;
  const V<T> hi = splat<T>(Traits<T>::kMaxT);
  t = t > hi ? hi : t;
  t = t < -hi ? -hi : t;
  k = __builtin_convertvector(t, I<T>);                         // truncation toward zero
  const V<T> f = (t - __builtin_convertvector(k, V<T>)) * ln2;  // |f| < ln 2
  V<T> r = splat<T>(1);
  for (int n = Traits<T>::kExpTerms; n >= 1; --n) r = splat<T>(1) + f * r * (T(1) / T(n));
  m = r;
}

template <typename T>
inline V<T> load(const T* p, int64_t n) {
  V<T> x{};
  std::memcpy(&x, p, sizeof(T) * static_cast<size_t>(n));
  return x;
}

template <typename T>
inline void store(T* p, V<T> x, int64_t n) {
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

struct Item {
  int64_t b, c0, nc;
  bool rev;
};

inline Item item_of(int64_t item, int64_t D, bool bidir, int64_t N) {
  const int64_t halves = bidir ? 2 : 1, hd = D / halves;
  const int64_t nb = (hd + N - 1) / N;
  Item it;
  it.b = item / (halves * nb);
  const int64_t r = item % (halves * nb);
  const int64_t half = r / nb, blk = r % nb;
  it.c0 = half * hd + blk * N;
  it.nc = std::min<int64_t>(N, hd - blk * N);
  it.rev = half == 1;
  return it;
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
void load_level0(const AIBScanParams<T>& p, const Item& it, Block<T> x) {
  const int64_t L = p.L, D = p.D;
  for (int64_t q = 0; q < L; ++q) {
    const int64_t i = it.rev ? L - 1 - q : q;
    const int64_t off = (it.b * L + i) * D + it.c0;
    const bool valid = !p.mask || p.mask[it.b * L + i];
    if (!valid) {
      x.h[q] = V<T>{};
      x.u[q] = V<T>{};
      x.e[q] = isplat<T>(kSentinel);
      continue;
    }
    V<T> m;
    I<T> k;
    exp_split<T>(load(p.a + off, it.nc), m, k);
    x.h[q] = m * load(p.v + off, it.nc);
    x.u[q] = m;
    x.e[q] = k;
  }
}

template <typename T>
void level_weight(const AIBScanParams<T>& p, const Item& it, int64_t j, V<T>& wm, I<T>& we) {
  exp_split<T>(load(p.lw + j * p.D + it.c0, it.nc), wm, we);
}

inline int64_t levels_for(int64_t L) {
  int64_t k = 0;
  while ((int64_t{1} << k) < L) ++k;
  return k;
}

template <typename T>
void forward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  const int64_t L = p.L, D = p.D, N = Traits<T>::N;
  for (int64_t item = begin; item < end; ++item) {
    const Item it = item_of(item, D, p.bidirectional, N);
    Block<T> x = block_at<T>(scratch, 0, L);
    load_level0(p, it, x);
    for (int64_t j = 0; j < p.K; ++j) {
      const int64_t s = int64_t{1} << j;
      V<T> wm;
      I<T> we;
      level_weight(p, it, j, wm, we);
      // Descending, so x[q - s] still holds the previous level when it is read.
      for (int64_t q = L - 1; q >= s; --q)
        combine<T>(x.h[q], x.u[q], x.e[q], x.h[q - s], x.u[q - s], x.e[q - s], wm, we);
    }
    for (int64_t q = 0; q < L; ++q) {
      const int64_t i = it.rev ? L - 1 - q : q;
      const bool valid = !p.mask || p.mask[it.b * L + i];
      const V<T> u = x.u[q];
      V<T> o = x.h[q] / u;
      o = u > splat<T>(0) ? o : V<T>{};
      store(p.o + (it.b * L + i) * D + it.c0, valid ? o : V<T>{}, it.nc);
    }
  }
}

template <typename T>
void backward_items(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch) {
  const int64_t L = p.L, D = p.D, K = p.K, N = Traits<T>::N;
  for (int64_t item = begin; item < end; ++item) {
    const Item it = item_of(item, D, p.bidirectional, N);
    // Recompute the forward levels, keeping each one: snapshot j is the state before level j.
    load_level0(p, it, block_at<T>(scratch, 0, L));
    for (int64_t j = 0; j < K; ++j) {
      const int64_t s = int64_t{1} << j;
      V<T> wm;
      I<T> we;
      level_weight(p, it, j, wm, we);
      const Block<T> x = block_at<T>(scratch, j, L), y = block_at<T>(scratch, j + 1, L);
      std::memcpy(y.h, x.h, sizeof(V<T>) * static_cast<size_t>(s));
      std::memcpy(y.u, x.u, sizeof(V<T>) * static_cast<size_t>(s));
      std::memcpy(y.e, x.e, sizeof(I<T>) * static_cast<size_t>(s));
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
      const int64_t i = it.rev ? L - 1 - q : q;
      const bool valid = !p.mask || p.mask[it.b * L + i];
      const V<T> u = fin.u[q];
      const auto live = u > splat<T>(0);
      const V<T> g = valid ? load(p.grad_o + (it.b * L + i) * D + it.c0, it.nc) : V<T>{};
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
      level_weight(p, it, j, wm, we);
      const Block<T> x = block_at<T>(scratch, j, L);
      VD<T> acc{};
      for (int64_t q = s; q < L; ++q) {
        const V<T> t = (adj.h[q] * x.h[q - s] + adj.u[q] * x.u[q - s]) * wm;
        acc += __builtin_convertvector(scale<T>(t, adj.e[q] + x.e[q - s] + we), VD<T>);
      }
      double* gl = p.grad_lw + (it.b * K + j) * D + it.c0;
      for (int64_t c = 0; c < it.nc; ++c) gl[c] = acc[c];
      // Ascending, so adj[q + s] still holds the later level when it is read.
      for (int64_t q = 0; q + s < L; ++q)
        combine<T>(adj.h[q], adj.u[q], adj.e[q], adj.h[q + s], adj.u[q + s], adj.e[q + s], wm, we);
    }
    // dV = E dL/dH, dA = E (dL/dU + V dL/dH), with E = u0 * 2^e0 from snapshot 0.
    const Block<T> x0 = block_at<T>(scratch, 0, L);
    for (int64_t q = 0; q < L; ++q) {
      const int64_t i = it.rev ? L - 1 - q : q;
      const int64_t off = (it.b * L + i) * D + it.c0;
      const bool valid = !p.mask || p.mask[it.b * L + i];
      if (!valid) {
        store(p.grad_v + off, V<T>{}, it.nc);
        store(p.grad_a + off, V<T>{}, it.nc);
        continue;
      }
      const I<T> ex = adj.e[q] + x0.e[q];
      const V<T> v = load(p.v + off, it.nc);
      store(p.grad_v + off, scale<T>(adj.h[q] * x0.u[q], ex), it.nc);
      store(p.grad_a + off, scale<T>(x0.u[q] * (adj.u[q] + v * adj.h[q]), ex), it.nc);
    }
  }
}

}  // namespace seqmix::ops::cpu::SEQMIX_ISA
