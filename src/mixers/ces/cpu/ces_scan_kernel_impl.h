// CES recurrence kernels. Per channel, a complex state s and coefficients mu, c:
//   prefix form (causal half):  s_t = mu s_{t-1} + x_t,  y_t = Re(c s_t)
//   suffix form (bidirectional's backward half), in reversed time: y_t = Re(c s_{t-1}) before
//   s_t = mu s_{t-1} + x_t ("exclusive": the current token is not included).
// Backward of one form, with g_t = dL/dy_t (0 where masked):
//   dL/dx_n = Re(c r_n),  r_n = g_n + mu r_{n+1}   (the transposed recurrence, run in reverse;
//                                                    exclusive: dL/dx_n = Re(c r_{n+1}))
//   dL/dc   = (sum_t g_t Re s_t, -sum_t g_t Im s_t)          (y = Re c Re s - Im c Im s)
//   dL/dmu  = (Re G, -Im G),  G = c sum_t g_t d_t,  d_t = ds_t/dmu = mu d_{t-1} + s_{t-1}
// (y = Re F(mu) with F holomorphic, so dy/dRe mu = Re F', dy/dIm mu = -Im F').
// The second pass carries s and d forward, so no state is stored between the passes.
// Compiled once per instruction set: the including file defines SEQMIX_ISA (a namespace
// name) and is built with that ISA's flags; the loops over channels are left to the
// compiler's vectoriser.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ces_scan_kernel.h"

#ifndef SEQMIX_ISA
#error "define SEQMIX_ISA before including ces_scan_kernel_impl.h"
#endif

namespace seqmix::ops::cpu::SEQMIX_ISA {

namespace {

constexpr int64_t NC = kCESChannels;

struct Item {
  int64_t b, c0, nc;
};

Item item_of(int64_t item, int64_t H) {
  const int64_t runs = (H + NC - 1) / NC;
  Item it;
  it.b = item / runs;
  it.c0 = (item % runs) * NC;
  it.nc = std::min(NC, H - it.c0);
  return it;
}

// Coefficients of channels [c0, c0 + nc) of one form (row offset `prow` into mu, c).
template <typename T>
struct Coef {
  T mr[NC], mi[NC], cr[NC], ci[NC];
  template <typename S>
  Coef(const CESScanParams<T, S>& p, int64_t prow, int64_t nc) {
    for (int64_t k = 0; k < nc; ++k) {
      mr[k] = p.mu[2 * (prow + k)];
      mi[k] = p.mu[2 * (prow + k) + 1];
      cr[k] = p.c[2 * (prow + k)];
      ci[k] = p.c[2 * (prow + k) + 1];
    }
  }
};

inline bool valid_at(const uint8_t* mask, int64_t b, int64_t L, int64_t t) {
  return !mask || mask[b * L + t];
}

// Rows are H elements apart: the hardware prefetchers do not follow a run of lines per row
// with a large stride, and each step's work is short, so the row kPrefetchRows steps ahead is
// requested explicitly.
constexpr int64_t kPrefetchRows = 4;

template <typename S>
inline void prefetch_row(const S* base, int64_t L, int64_t H, const Item& it, int64_t t) {
  if (t < 0 || t >= L) return;
  const char* row = reinterpret_cast<const char*>(base + (it.b * L + t) * H + it.c0);
  for (int64_t off = 0; off < it.nc * static_cast<int64_t>(sizeof(S)); off += 64)
    __builtin_prefetch(row + off);
}

// Writes n values of a row that is not read again by this pass. In the arithmetic type:
// streaming stores (whole cache lines, no read-for-ownership) where the row is 64-byte
// aligned, otherwise plainly. In bfloat16: rounded once, plain stores.
template <typename S, typename T>
inline void store_row(S* dst, const T* src, int64_t n) {
  int64_t j = 0;
  if constexpr (std::is_same_v<S, T>) {
    if ((reinterpret_cast<uintptr_t>(dst) & 63) == 0) {
      constexpr int64_t per = 16 / static_cast<int64_t>(sizeof(T));  // elements per 16 bytes
      for (; j + per <= n; j += per) {
        if constexpr (std::is_same_v<T, float>)
          _mm_stream_ps(dst + j, _mm_loadu_ps(src + j));
        else
          _mm_stream_pd(dst + j, _mm_loadu_pd(src + j));
      }
    }
  }
  for (; j < n; ++j) dst[j] = static_cast<S>(src[j]);
}

// The rows the bidirectional form's prefix pass leaves for its suffix pass to add to: the
// output itself when it is stored in the arithmetic type, else the float buffer `acc`
// ([L][nc], row t at t * nc).
template <typename T, typename S>
inline T* kept_row(S* out, T* acc, int64_t t, int64_t nc) {
  if constexpr (std::is_same_v<S, T>)
    return out;
  else
    return acc + t * nc;
}

// Adds `add` to the kept prefix result of one element and stores the sum as the final value.
template <typename T, typename S>
inline void finish_element(S& out, const T* kept, int64_t j, T add) {
  if constexpr (std::is_same_v<S, T>)
    out += add;
  else
    out = static_cast<S>(kept[j] + add);
}

// One form over item `it`: prefix (suffix = false) writes y (bidirectional: its kept rows);
// suffix adds to them and writes y.
template <typename T, typename S>
void forward_form(const CESScanParams<T, S>& p, const Item& it, bool suffix, T* acc) {
  const int64_t L = p.L, H = p.H, nc = it.nc;
  const Coef<T> k(p, (suffix ? H : 0) + it.c0, nc);
  T sr[NC] = {}, si[NC] = {};
  for (int64_t step = 0; step < L; ++step) {
    const int64_t t = suffix ? L - 1 - step : step;
    prefetch_row(p.x, L, H, it, suffix ? t - kPrefetchRows : t + kPrefetchRows);
    const S* x = p.x + (it.b * L + t) * H + it.c0;
    S* y = p.y + (it.b * L + t) * H + it.c0;
    T* kept = p.bidirectional ? kept_row(y, acc, t, nc) : nullptr;
    const bool valid = valid_at(p.mask, it.b, L, t);
    if (!suffix) {
      // The causal form's output is final here: it leaves by streaming stores. (The suffix
      // pass of the bidirectional form reads it back, so there it stays in cache.)
      T out[NC];
      T* o = p.bidirectional ? kept : out;
      if (valid) {
        for (int64_t j = 0; j < nc; ++j) {
          const T nr = k.mr[j] * sr[j] - k.mi[j] * si[j] + static_cast<T>(x[j]);
          const T ni = k.mr[j] * si[j] + k.mi[j] * sr[j];
          sr[j] = nr;
          si[j] = ni;
          o[j] = k.cr[j] * sr[j] - k.ci[j] * si[j];
        }
      } else {
        for (int64_t j = 0; j < nc; ++j) {
          const T nr = k.mr[j] * sr[j] - k.mi[j] * si[j];
          const T ni = k.mr[j] * si[j] + k.mi[j] * sr[j];
          sr[j] = nr;
          si[j] = ni;
          o[j] = 0;
        }
      }
      if (!p.bidirectional) store_row(y, out, nc);
    } else {
      for (int64_t j = 0; j < nc; ++j) {
        finish_element(y[j], kept, j, valid ? k.cr[j] * sr[j] - k.ci[j] * si[j] : T(0));
        const T nr = k.mr[j] * sr[j] - k.mi[j] * si[j] + (valid ? static_cast<T>(x[j]) : T(0));
        const T ni = k.mr[j] * si[j] + k.mi[j] * sr[j];
        sr[j] = nr;
        si[j] = ni;
      }
    }
  }
}

// Backward of one form over item `it`: grad_x (prefix: written, suffix: added) and this
// form's parameter gradients for sequence it.b.
template <typename T, typename S>
void backward_form(const CESScanParams<T, S>& p, const Item& it, bool suffix, T* acc) {
  const int64_t L = p.L, H = p.H, nc = it.nc, prow = (suffix ? H : 0) + it.c0;
  const Coef<T> k(p, prow, nc);
  // Pass 1, against the scan order: r = g + mu r, dL/dx = Re(c r) (exclusive: before adding g).
  {
    T rr[NC] = {}, ri[NC] = {};
    T out[NC];
    for (int64_t step = 0; step < L; ++step) {
      const int64_t t = suffix ? step : L - 1 - step;
      prefetch_row(p.grad_y, L, H, it, suffix ? t + kPrefetchRows : t - kPrefetchRows);
      const S* g = p.grad_y + (it.b * L + t) * H + it.c0;
      S* dx = p.grad_x + (it.b * L + t) * H + it.c0;
      T* kept = p.bidirectional ? kept_row(dx, acc, t, nc) : out;
      const bool valid = valid_at(p.mask, it.b, L, t);
      for (int64_t j = 0; j < nc; ++j) {
        const T gj = valid ? static_cast<T>(g[j]) : T(0);
        if (suffix) finish_element(dx[j], kept, j, valid ? k.cr[j] * rr[j] - k.ci[j] * ri[j] : T(0));
        const T nr = k.mr[j] * rr[j] - k.mi[j] * ri[j] + gj;
        const T ni = k.mr[j] * ri[j] + k.mi[j] * rr[j];
        rr[j] = nr;
        ri[j] = ni;
        if (!suffix) kept[j] = valid ? k.cr[j] * rr[j] - k.ci[j] * ri[j] : T(0);
      }
      // The causal form's gradient is final here (the bidirectional one's waits for the
      // suffix pass).
      if (!p.bidirectional) store_row(dx, out, nc);
    }
  }
  // Pass 2, in scan order: s and d = ds/dmu, with the sums of g s and g d.
  T sr[NC] = {}, si[NC] = {}, dr[NC] = {}, di[NC] = {};
  double asr[NC] = {}, asi[NC] = {}, adr[NC] = {}, adi[NC] = {};
  for (int64_t step = 0; step < L; ++step) {
    const int64_t t = suffix ? L - 1 - step : step;
    prefetch_row(p.x, L, H, it, suffix ? t - kPrefetchRows : t + kPrefetchRows);
    prefetch_row(p.grad_y, L, H, it, suffix ? t - kPrefetchRows : t + kPrefetchRows);
    const S* x = p.x + (it.b * L + t) * H + it.c0;
    const S* g = p.grad_y + (it.b * L + t) * H + it.c0;
    const bool valid = valid_at(p.mask, it.b, L, t);
    for (int64_t j = 0; j < nc; ++j) {
      const T gj = valid ? static_cast<T>(g[j]) : T(0), xj = valid ? static_cast<T>(x[j]) : T(0);
      if (suffix) {  // the output reads the state before this token
        asr[j] += gj * sr[j];
        asi[j] += gj * si[j];
        adr[j] += gj * dr[j];
        adi[j] += gj * di[j];
      }
      const T ndr = k.mr[j] * dr[j] - k.mi[j] * di[j] + sr[j];
      const T ndi = k.mr[j] * di[j] + k.mi[j] * dr[j] + si[j];
      const T nsr = k.mr[j] * sr[j] - k.mi[j] * si[j] + xj;
      const T nsi = k.mr[j] * si[j] + k.mi[j] * sr[j];
      dr[j] = ndr;
      di[j] = ndi;
      sr[j] = nsr;
      si[j] = nsi;
      if (!suffix) {
        asr[j] += gj * sr[j];
        asi[j] += gj * si[j];
        adr[j] += gj * dr[j];
        adi[j] += gj * di[j];
      }
    }
  }
  const int64_t C = p.bidirectional ? 2 * H : H;
  double* gmu = p.grad_mu + (it.b * C + prow) * 2;
  double* gc = p.grad_c + (it.b * C + prow) * 2;
  for (int64_t j = 0; j < nc; ++j) {
    gc[2 * j] = asr[j];
    gc[2 * j + 1] = -asi[j];
    const double cr = k.cr[j], ci = k.ci[j];
    gmu[2 * j] = cr * adr[j] - ci * adi[j];       // Re(c a_d)
    gmu[2 * j + 1] = -(cr * adi[j] + ci * adr[j]);  // -Im(c a_d)
  }
}

}  // namespace

template <typename T, typename S>
void ces_forward_items(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc) {
  for (int64_t item = begin; item < end; ++item) {
    const Item it = item_of(item, p.H);
    forward_form(p, it, false, acc);
    if (p.bidirectional) forward_form(p, it, true, acc);
  }
  _mm_sfence();  // streaming stores are visible before the caller's threads join
}

template <typename T, typename S>
void ces_backward_items(const CESScanParams<T, S>& p, int64_t begin, int64_t end, T* acc) {
  for (int64_t item = begin; item < end; ++item) {
    const Item it = item_of(item, p.H);
    backward_form(p, it, false, acc);
    if (p.bidirectional) backward_form(p, it, true, acc);
  }
  _mm_sfence();
}

#define SEQMIX_INSTANTIATE(T, S)                                                          \
  template void ces_forward_items<T, S>(const CESScanParams<T, S>&, int64_t, int64_t, T*); \
  template void ces_backward_items<T, S>(const CESScanParams<T, S>&, int64_t, int64_t, T*);
SEQMIX_INSTANTIATE(float, float)
SEQMIX_INSTANTIATE(double, double)
SEQMIX_INSTANTIATE(float, c10::BFloat16)
#undef SEQMIX_INSTANTIATE

}  // namespace seqmix::ops::cpu::SEQMIX_ISA
