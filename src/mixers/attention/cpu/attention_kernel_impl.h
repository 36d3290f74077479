// Implementation of the fused attention kernels (attention_kernel.h), compiled once per
// instruction set like the AIB and CES kernels: the including file defines SEQMIX_ISA.
//
// Every item copies its head's q (times the softmax scale), k, v (and in backward dO) into
// zero-padded scratch, rows padded to whole vectors of dh and keys to whole chunks, so the
// three inner products below have no tails:
//   scores:     S[r, j]  = sum_d X[r, d] YT[d, j]     (X K^T, dO V^T; vectors along keys)
//   rows:       O[r, :]  = sum_j P[r, j] Y[j, :]      (P V, dS K;     vectors along dh)
//   columns:    A[j, :] += sum_r P[r, j] X[r, :]      (P^T dO, dS^T Q)
// Padded keys carry a -inf bias, so they get probability 0; padded query rows are zero and
// their results are dropped.
//
// The build with SEQMIX_ATTN_BF16_PRODUCTS (AVX-512 BF16, chosen at run time on a CPU that has
// it) computes the two score products, Q K^T and dO V^T, with bfloat16 dot products
// (vdpbf16ps) when those inputs are bfloat16: the products of two bfloat16 values are exact in
// float32 and are summed in float32, so only the order of the sums changes. The products
// with a computed operand (P V, P^T dO, dS K, dS^T Q) stay in float32: rounding P or dS to
// bfloat16, as GPU flash-attention does, would round an intermediate and break the
// "computed in float32, rounded once" contract of include/seqmix/ops/common.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention_kernel.h"
#include "ops/cpu/vec_math_impl.h"

// The AVX-512 BF16 build (cmake/SeqmixHelpers.cmake's seqmix_isa_kernels) adds the
// bfloat16 score products.
#if defined(SEQMIX_ISA_AVX512BF16) && !defined(SEQMIX_ATTN_BF16_PRODUCTS)
#define SEQMIX_ATTN_BF16_PRODUCTS 1
#endif
#ifdef SEQMIX_ATTN_BF16_PRODUCTS
#include <immintrin.h>
#endif

#ifndef SEQMIX_ISA
#error "define SEQMIX_ISA before including attention_kernel_impl.h"
#endif

namespace seqmix::ops::cpu::SEQMIX_ISA {

namespace attn {

template <typename T>
constexpr int64_t kN = Traits<T>::N;
// Keys per scores tile: four vectors, accumulated in registers over dh.
template <typename T>
constexpr int64_t kChunk = 4 * Traits<T>::N;
// Query rows per rows/columns tile (four accumulators in flight).
constexpr int64_t kRowTile = 4;
// Bytes of one block's scores: with its gradient (backward) it stays in a 2 MiB L2.
constexpr int64_t kScoreBytes = 512 * 1024;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <typename T>
inline V<T> vload(const T* p) {
  V<T> x;
  std::memcpy(&x, p, sizeof(V<T>));
  return x;
}

template <typename T>
inline void vstore(T* p, V<T> x) {
  std::memcpy(p, &x, sizeof(V<T>));
}

template <typename T>
inline T hsum(V<T> x) {
  T s = 0;
  for (int i = 0; i < kN<T>; ++i) s += x[i];
  return s;
}

template <typename T>
inline T hmax(V<T> x) {
  T s = x[0];
  for (int i = 1; i < kN<T>; ++i) s = std::max(s, x[i]);
  return s;
}

// exp(x) for x <= 0 (and -inf), 0 below the smallest normal number.
template <typename T>
inline V<T> exp_nonpos(V<T> x) {
  V<T> m;
  I<T> k;
  exp_split<T>(x, m, k);
  return m * pow2_nonpos<T>(k);
}

// S[r, j0 .. j0 + n) for rows r < R: X [R][DP], YT [DP][ld], S [R][ld]; n a multiple of kChunk.
template <typename T>
void scores(const T* X, int64_t R, int64_t DP, const T* YT, int64_t ld, int64_t n, T* S) {
  constexpr int64_t N = kN<T>;
  for (int64_t j0 = 0; j0 < n; j0 += kChunk<T>)
    for (int64_t r = 0; r < R; ++r) {
      V<T> a0{}, a1{}, a2{}, a3{};
      const T* x = X + r * DP;
      const T* y = YT + j0;
      for (int64_t d = 0; d < DP; ++d, y += ld) {
        const V<T> xd = splat<T>(x[d]);
        a0 += xd * vload<T>(y);
        a1 += xd * vload<T>(y + N);
        a2 += xd * vload<T>(y + 2 * N);
        a3 += xd * vload<T>(y + 3 * N);
      }
      T* s = S + r * ld + j0;
      vstore<T>(s, a0);
      vstore<T>(s + N, a1);
      vstore<T>(s + 2 * N, a2);
      vstore<T>(s + 3 * N, a3);
    }
}

// O[r, :] = sum_{j < n} P[r, j] Y[j, :] for rows r < R (R a multiple of kRowTile):
// P [R][ld], Y [n][DP], O [R][DP].
template <typename T>
void rows(const T* P, int64_t R, int64_t ld, int64_t n, const T* Y, int64_t DP, T* O) {
  for (int64_t r = 0; r < R; r += kRowTile)
    for (int64_t d0 = 0; d0 < DP; d0 += kN<T>) {
      V<T> a0{}, a1{}, a2{}, a3{};
      const T* p = P + r * ld;
      for (int64_t j = 0; j < n; ++j) {
        const V<T> y = vload<T>(Y + j * DP + d0);
        a0 += splat<T>(p[j]) * y;
        a1 += splat<T>(p[ld + j]) * y;
        a2 += splat<T>(p[2 * ld + j]) * y;
        a3 += splat<T>(p[3 * ld + j]) * y;
      }
      vstore<T>(O + r * DP + d0, a0);
      vstore<T>(O + (r + 1) * DP + d0, a1);
      vstore<T>(O + (r + 2) * DP + d0, a2);
      vstore<T>(O + (r + 3) * DP + d0, a3);
    }
}

// A[j, :] += sum_{r < R} P[r, j] X[r, :] for keys j < n (n a multiple of kRowTile):
// P [R][ld], X [R][DP], A [n][DP].
template <typename T>
void columns(const T* P, int64_t R, int64_t ld, int64_t n, const T* X, int64_t DP, T* A) {
  for (int64_t j = 0; j < n; j += kRowTile)
    for (int64_t d0 = 0; d0 < DP; d0 += kN<T>) {
      T* a = A + j * DP + d0;
      V<T> a0 = vload<T>(a), a1 = vload<T>(a + DP), a2 = vload<T>(a + 2 * DP),
           a3 = vload<T>(a + 3 * DP);
      for (int64_t r = 0; r < R; ++r) {
        const V<T> x = vload<T>(X + r * DP + d0);
        const T* p = P + r * ld + j;
        a0 += splat<T>(p[0]) * x;
        a1 += splat<T>(p[1]) * x;
        a2 += splat<T>(p[2]) * x;
        a3 += splat<T>(p[3]) * x;
      }
      vstore<T>(a, a0);
      vstore<T>(a + DP, a1);
      vstore<T>(a + 2 * DP, a2);
      vstore<T>(a + 3 * DP, a3);
    }
}

#ifdef SEQMIX_ATTN_BF16_PRODUCTS
// S[r, j0 .. j0 + n) = scale sum_d X[r, d] Y[j, d] for rows r < RT (a multiple of kRowTile)
// with bfloat16 operands: X [RT][DP] row-major, so (X[r, 2i], X[r, 2i + 1]) is one 32-bit
// word; Y2 [DP / 2][ld][2], the pairs (Y[j, 2i], Y[j, 2i + 1]) of 16 keys side by side, as
// vdpbf16ps takes them. A tile is 4 rows x 64 keys in 16 float32 accumulators: each pair step
// loads 4 key vectors and broadcasts 4 words for 16 dot products.
inline void scores_bf16(const uint16_t* X, int64_t RT, int64_t DP, const uint16_t* Y2,
                        int64_t ld, int64_t n, float scale, float* S) {
  constexpr int64_t N = 16;
  for (int64_t j0 = 0; j0 < n; j0 += kChunk<float>)
    for (int64_t r = 0; r < RT; r += kRowTile) {
      __m512 a[kRowTile][4];
      for (auto& row : a)
        for (auto& x : row) x = _mm512_setzero_ps();
      const uint16_t* x = X + r * DP;
      for (int64_t i = 0; i < DP / 2; ++i) {
        const uint16_t* y = Y2 + (i * ld + j0) * 2;
        __m512bh yv[4];
        for (int c = 0; c < 4; ++c) yv[c] = (__m512bh)_mm512_loadu_si512(y + c * 2 * N);
        for (int rr = 0; rr < kRowTile; ++rr) {
          int32_t w;
          std::memcpy(&w, x + rr * DP + 2 * i, sizeof w);
          const __m512bh xv = (__m512bh)_mm512_set1_epi32(w);
          for (int c = 0; c < 4; ++c) a[rr][c] = _mm512_dpbf16_ps(a[rr][c], xv, yv[c]);
        }
      }
      const __m512 sv = _mm512_set1_ps(scale);
      for (int rr = 0; rr < kRowTile; ++rr)
        for (int c = 0; c < 4; ++c)
          _mm512_storeu_ps(S + (r + rr) * ld + j0 + c * N, _mm512_mul_ps(a[rr][c], sv));
    }
}
#endif

// Whether this build computes the product of two inputs in bfloat16: it has them
// (SEQMIX_ATTN_BF16_PRODUCTS) and both inputs are given as bfloat16 (AttentionParams::bf16;
// never for T = double). Q K^T asks on q and k alone, so that forward and backward compute
// the same scores; dO V^T on v and dO.
inline bool bf16_product(const uint16_t* a, const uint16_t* b) {
#ifdef SEQMIX_ATTN_BF16_PRODUCTS
  return a && b;
#else
  (void)a, (void)b;
  return false;
#endif
}

// An item's view of one input: T values, or the raw bits of bfloat16 values (T = float)
// when the caller gave them so (AttentionParams::bf16), widened as they are read.
template <typename T>
struct In {
  const T* p = nullptr;
  const uint16_t* pb = nullptr;
  T operator[](int64_t i) const {
    if constexpr (std::is_same_v<T, float>)
      if (pb) return bf16_value(pb[i]);
    return p[i];
  }
};

// Elements [offset, ...) of an input given as T (p) or as bfloat16 (pb).
template <typename T>
In<T> input(const T* p, const uint16_t* pb, int64_t offset) {
  return pb ? In<T>{nullptr, pb + offset} : In<T>{p + offset, nullptr};
}

// One item's padded copies and the per-block buffers, carved out of the caller's scratch
// (attention_scratch gives its size) and zeroed once per range of items: the padding stays 0.
template <typename T>
struct Scratch {
  int64_t DP, LP, BR;
  T *kt, *vp, *bias, *qs, *s, *out;          // forward and backward
  T *vt, *kp, *dop, *ds, *dk, *dv, *di;      // backward only
  // bfloat16 copies for the score products (bf16_product): K and V as pairs along d
  // ([DP / 2][LP][2]), a block's q and dO rows ([BR][DP]). Sized whenever the inputs are
  // bfloat16, so that every build lays the scratch out alike.
  uint16_t *kt2, *qb, *vt2, *dob;

  Scratch(const AttentionParams<T>& p, bool backward, T* base = nullptr) {
    DP = round_up(p.dh, kN<T>);
    LP = round_up(std::max<int64_t>(p.L, 1), kChunk<T>);
    BR = std::clamp<int64_t>(kScoreBytes / static_cast<int64_t>(sizeof(T)) / LP / kRowTile *
                                 kRowTile,
                             kRowTile, 64);
    // Offsets are counted as integers: with no base (sizing only) no pointer is formed,
    // since arithmetic on a null pointer is undefined (found by fuzz/fuzz_config).
    int64_t at = 0;
    const auto take = [&](int64_t n) {
      T* q = base ? base + at : nullptr;
      at += n;
      return q;
    };
    kt = take(DP * LP);
    vp = take(LP * DP);
    bias = take(LP);
    qs = take(BR * DP);
    s = take(BR * LP);
    out = take(BR * DP);
    vt = kp = dop = ds = dk = dv = di = nullptr;
    if (backward) {
      vt = take(DP * LP);
      kp = take(LP * DP);
      dop = take(BR * DP);
      ds = take(BR * LP);
      dk = take(LP * DP);
      dv = take(LP * DP);
      di = take(BR);
    }
    // n bfloat16 values in whole elements of T.
    const auto take16 = [&](int64_t n) {
      return reinterpret_cast<uint16_t*>(take((n * 2 + sizeof(T) - 1) / sizeof(T)));
    };
    kt2 = qb = vt2 = dob = nullptr;
    if (std::is_same_v<T, float> && (p.bf16.q || p.bf16.v)) {
      kt2 = take16(DP * LP);
      qb = take16(BR * DP);
      if (backward) {
        vt2 = take16(DP * LP);
        dob = take16(BR * DP);
      }
    }
    elems = at;
    // All-zero bits are 0 in float, double and bfloat16 alike.
    if (base) std::memset(static_cast<void*>(base), 0, sizeof(T) * at);
  }
  int64_t elems;
};

// Copies item bh's keys and values (and their transposes as asked) into the scratch and sets
// the key bias: 0 for a valid key, -inf for a masked or padded one.
template <typename T>
void load_item(const AttentionParams<T>& p, int64_t bh, Scratch<T>& w, bool backward) {
  const int64_t L = p.L, dh = p.dh, DP = w.DP, LP = w.LP;
  const In<T> k = input(p.k, p.bf16.k, bh * L * dh);
  const In<T> v = input(p.v, p.bf16.v, bh * L * dh);
  for (int64_t j = 0; j < L; ++j)
    for (int64_t d = 0; d < dh; ++d) {
      w.kt[d * LP + j] = k[j * dh + d];
      w.vp[j * DP + d] = v[j * dh + d];
      if (backward) {
        w.vt[d * LP + j] = v[j * dh + d];
        w.kp[j * DP + d] = k[j * dh + d];
      }
    }
  // Raw bits in the pair layout of scores_bf16; d >= dh and j >= L stay 0.
  const uint16_t* kb = bf16_product(p.bf16.q, p.bf16.k) ? p.bf16.k + bh * L * dh : nullptr;
  const uint16_t* vb =
      backward && bf16_product(p.bf16.v, p.bf16.grad_o) ? p.bf16.v + bh * L * dh : nullptr;
  if (kb || vb)
    for (int64_t j = 0; j < L; ++j)
      for (int64_t d = 0; d < dh; ++d) {
        const int64_t at = ((d / 2) * LP + j) * 2 + d % 2;
        if (kb) w.kt2[at] = kb[j * dh + d];
        if (vb) w.vt2[at] = vb[j * dh + d];
      }
  const uint8_t* km = p.key_mask ? p.key_mask + (bh / p.H) * L : nullptr;
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < LP; ++j) w.bias[j] = j < L && (!km || km[j]) ? T(0) : ninf;
}

// Copies rows [r0, r0 + R) of src [L][dh] into dst [BR][DP] times `mul`, zero elsewhere.
template <typename T>
void load_rows(In<T> src, int64_t r0, int64_t R, int64_t dh, T mul, Scratch<T>& w, T* dst) {
  for (int64_t i = 0; i < w.BR * w.DP; ++i) dst[i] = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < dh; ++d) dst[r * w.DP + d] = mul * src[(r0 + r) * dh + d];
}

// Copies the raw bfloat16 rows [r0, r0 + R) of src [L][dh] into dst [BR][DP], zero elsewhere.
template <typename T>
void load_rows_bf16(const uint16_t* src, int64_t r0, int64_t R, int64_t dh, Scratch<T>& w,
                    uint16_t* dst) {
  std::memset(dst, 0, sizeof(uint16_t) * w.BR * w.DP);
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(dst + r * w.DP, src + (r0 + r) * dh, sizeof(uint16_t) * dh);
}

// Sets the scores of masked and padded keys to -inf (a select, not an add: a non-finite k at
// a padded position must not reach the row) and hides the future (causal): row r, query
// r0 + r, sees keys j <= r0 + r.
template <typename T>
void mask_scores(const AttentionParams<T>& p, int64_t r0, int64_t R, int64_t n, Scratch<T>& w) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < R; ++r) {
    T* s = w.s + r * w.LP;
    for (int64_t j = 0; j < n; j += kN<T>) {
      const V<T> b = vload<T>(w.bias + j);
      vstore<T>(s + j, b == splat<T>(0) ? vload<T>(s + j) : b);
    }
    if (p.causal)
      for (int64_t j = r0 + r + 1; j < n; ++j) s[j] = ninf;
  }
}

// Keys a block of queries [r0, r0 + R) may see, rounded up to whole chunks.
template <typename T>
int64_t block_keys(const AttentionParams<T>& p, int64_t r0, int64_t R, const Scratch<T>& w) {
  return p.causal ? round_up(std::min(p.L, r0 + R), kChunk<T>) : w.LP;
}

// The block's scaled, masked scores S = (scale Q) K^T into w.s, with scale Q kept in w.qs.
// Forward and backward both call this, so backward's scores are forward's to the last bit and
// exp(S - lse) is exactly the forward probability.
template <typename T>
void block_scores(const AttentionParams<T>& p, In<T> q, int64_t r0, int64_t R, int64_t n,
                  Scratch<T>& w) {
  load_rows(q, r0, R, p.dh, p.scale, w, w.qs);
#ifdef SEQMIX_ATTN_BF16_PRODUCTS
  if constexpr (std::is_same_v<T, float>)
    if (bf16_product(p.bf16.q, p.bf16.k)) {
      load_rows_bf16(q.pb, r0, R, p.dh, w, w.qb);
      scores_bf16(w.qb, round_up(R, kRowTile), w.DP, w.kt2, w.LP, n, p.scale, w.s);
      mask_scores(p, r0, R, n, w);
      return;
    }
#endif
  scores(w.qs, R, w.DP, w.kt, w.LP, n, w.s);
  mask_scores(p, r0, R, n, w);
}

template <typename T>
void forward_items(const AttentionParams<T>& p, int64_t begin, int64_t end, T* scratch) {
  Scratch<T> w(p, false, scratch);
  const int64_t L = p.L, dh = p.dh, DP = w.DP, LP = w.LP;
  for (int64_t bh = begin; bh < end; ++bh) {
    load_item(p, bh, w, false);
    const In<T> q = input(p.q, p.bf16.q, bh * L * dh);
    T* o = p.o + bh * L * dh;
    T* lse = p.lse + bh * L;
    for (int64_t r0 = 0; r0 < L; r0 += w.BR) {
      const int64_t R = std::min(w.BR, L - r0), n = block_keys(p, r0, R, w);
      block_scores(p, q, r0, R, n, w);
      for (int64_t r = 0; r < w.BR; ++r) {
        T* s = w.s + r * LP;
        V<T> mx = splat<T>(-std::numeric_limits<T>::infinity());
        if (r < R)
          for (int64_t j = 0; j < n; j += kN<T>) {
            const V<T> x = vload<T>(s + j);
            mx = mx > x ? mx : x;
          }
        const T m = hmax<T>(mx);
        if (r >= R || m == -std::numeric_limits<T>::infinity()) {
          // A padded row of the block, or a query that sees no key: probability 0 everywhere.
          for (int64_t j = 0; j < n; ++j) s[j] = 0;
          if (r < R) lse[r0 + r] = std::numeric_limits<T>::infinity();
          continue;
        }
        V<T> sum{};
        for (int64_t j = 0; j < n; j += kN<T>) {
          const V<T> e = exp_nonpos<T>(vload<T>(s + j) - m);
          vstore<T>(s + j, e);
          sum += e;
        }
        const T l = hsum<T>(sum), inv = T(1) / l;
        for (int64_t j = 0; j < n; j += kN<T>) vstore<T>(s + j, vload<T>(s + j) * inv);
        lse[r0 + r] = m + std::log(l);
      }
      rows(w.s, round_up(R, kRowTile), LP, n, w.vp, DP, w.out);
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(o + (r0 + r) * dh, w.out + r * DP, sizeof(T) * dh);
    }
  }
}

template <typename T>
void backward_items(const AttentionParams<T>& p, int64_t begin, int64_t end, T* scratch) {
  Scratch<T> w(p, true, scratch);
  const int64_t L = p.L, dh = p.dh, DP = w.DP, LP = w.LP;
  for (int64_t bh = begin; bh < end; ++bh) {
    load_item(p, bh, w, true);
    for (int64_t i = 0; i < LP * DP; ++i) w.dk[i] = w.dv[i] = 0;
    const In<T> q = input(p.q, p.bf16.q, bh * L * dh);
    const T* o = p.o + bh * L * dh;
    const In<T> go = input(p.grad_o, p.bf16.grad_o, bh * L * dh);
    const T* lse = p.lse + bh * L;
    T* gq = p.grad_q + bh * L * dh;
    for (int64_t r0 = 0; r0 < L; r0 += w.BR) {
      const int64_t R = std::min(w.BR, L - r0), n = block_keys(p, r0, R, w);
      const int64_t RT = round_up(R, kRowTile);
      block_scores(p, q, r0, R, n, w);
      load_rows(go, r0, R, dh, T(1), w, w.dop);
      // D_r = dO_r . O_r: the softmax Jacobian's row term.
      for (int64_t r = 0; r < R; ++r) {
        T acc = 0;
        for (int64_t d = 0; d < dh; ++d) acc += go[(r0 + r) * dh + d] * o[(r0 + r) * dh + d];
        w.di[r] = acc;
      }
      for (int64_t r = 0; r < RT; ++r) {
        T* s = w.s + r * LP;
        if (r >= R) {
          for (int64_t j = 0; j < n; ++j) s[j] = 0;
          continue;
        }
        const V<T> m = splat<T>(lse[r0 + r]);  // +inf for a row without keys: P = 0
        for (int64_t j = 0; j < n; j += kN<T>) vstore<T>(s + j, exp_nonpos<T>(vload<T>(s + j) - m));
      }
      // dV += P^T dO
      columns(w.s, R, LP, n, w.dop, DP, w.dv);
      // dP = dO V^T, then dS = P (dP - D) in place
#ifdef SEQMIX_ATTN_BF16_PRODUCTS
      if constexpr (std::is_same_v<T, float>)
        if (bf16_product(p.bf16.v, p.bf16.grad_o)) {
          load_rows_bf16(go.pb, r0, R, dh, w, w.dob);
          scores_bf16(w.dob, RT, DP, w.vt2, LP, n, 1.0f, w.ds);
        } else {
          scores(w.dop, R, DP, w.vt, LP, n, w.ds);
        }
      else
#endif
        scores(w.dop, R, DP, w.vt, LP, n, w.ds);
      for (int64_t r = 0; r < RT; ++r) {
        T* ds = w.ds + r * LP;
        const T* s = w.s + r * LP;
        if (r >= R) {
          for (int64_t j = 0; j < n; ++j) ds[j] = 0;
          continue;
        }
        const V<T> dr = splat<T>(w.di[r]);
        for (int64_t j = 0; j < n; j += kN<T>)
          vstore<T>(ds + j, vload<T>(s + j) * (vload<T>(ds + j) - dr));
      }
      // dQ = scale dS K;  dK += dS^T (scale Q)
      rows(w.ds, RT, LP, n, w.kp, DP, w.out);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t d = 0; d < dh; ++d) gq[(r0 + r) * dh + d] = p.scale * w.out[r * DP + d];
      columns(w.ds, R, LP, n, w.qs, DP, w.dk);
    }
    T* gk = p.grad_k + bh * L * dh;
    T* gv = p.grad_v + bh * L * dh;
    for (int64_t j = 0; j < L; ++j) {
      std::memcpy(gk + j * dh, w.dk + j * DP, sizeof(T) * dh);
      std::memcpy(gv + j * dh, w.dv + j * DP, sizeof(T) * dh);
    }
  }
}

}  // namespace attn

template <typename T>
int64_t attention_scratch(const AttentionParams<T>& p, bool backward) {
  return attn::Scratch<T>(p, backward).elems;
}

template <typename T>
void attention_forward_items(const AttentionParams<T>& p, int64_t begin, int64_t end, T* w) {
  attn::forward_items<T>(p, begin, end, w);
}

template <typename T>
void attention_backward_items(const AttentionParams<T>& p, int64_t begin, int64_t end, T* w) {
  attn::backward_items<T>(p, begin, end, w);
}

template int64_t attention_scratch<float>(const AttentionParams<float>&, bool);
template int64_t attention_scratch<double>(const AttentionParams<double>&, bool);
template void attention_forward_items<float>(const AttentionParams<float>&, int64_t, int64_t,
                                             float*);
template void attention_forward_items<double>(const AttentionParams<double>&, int64_t, int64_t,
                                              double*);
template void attention_backward_items<float>(const AttentionParams<float>&, int64_t, int64_t,
                                              float*);
template void attention_backward_items<double>(const AttentionParams<double>&, int64_t, int64_t,
                                               double*);

}  // namespace seqmix::ops::cpu::SEQMIX_ISA
