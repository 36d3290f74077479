#pragma once
// Vector math shared by the CPU kernels (AIB scan, attention), compiled once per instruction
// set: the including file defines SEQMIX_ISA and is built with that ISA's flags. GCC vector
// extensions, one 64-byte vector per V<T>, so the same source becomes AVX-512 or SSE2 code.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifndef SEQMIX_ISA
#error "define SEQMIX_ISA before including vec_math_impl.h"
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
  static constexpr int kSafeExp = 100;     // fast path: bound on sums is kept at 2^kSafeExp
  static constexpr int kTinyExp = -100;    // fast path: every live U stays above 2^kTinyExp
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
  // A NaN (a diverged model's input) gets exponent 0 and keeps its NaN in m: converting it
  // would give INT_MIN, whose exponent sums downstream overflow (undefined behaviour).
  const V<T> tk = t == t ? t : splat<T>(0);
  k = __builtin_convertvector(tk + (tk >= splat<T>(0) ? splat<T>(T(0.5)) : splat<T>(T(-0.5))), I<T>);
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

// bfloat16 storage (mixed precision) for float vectors: a bfloat16 is the upper half of a
// float32, kept here as its raw bits.
typedef uint16_t BF16Bits __attribute__((vector_size(32)));
typedef uint32_t F32Bits __attribute__((vector_size(64)));

// One bfloat16 value (raw bits) as a float (exact).
inline float bf16_value(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// Loads n <= 16 bfloat16 values as floats (exact).
inline V<float> load_bf16(const uint16_t* p, int64_t n) {
  BF16Bits b{};
  // As in load(): a constant size for the full vector, so no memcpy call.
  if (n == 16)
    std::memcpy(&b, p, sizeof(b));
  else
    std::memcpy(&b, p, sizeof(uint16_t) * static_cast<size_t>(n));
  const F32Bits w = __builtin_convertvector(b, F32Bits) << 16;
  V<float> x;
  std::memcpy(&x, &w, sizeof(x));
  return x;
}

// Rounds n <= 16 floats to bfloat16, to nearest with ties to even, as c10::BFloat16 does
// (a NaN becomes the quiet NaN 0x7FC0), and stores them.
inline void store_bf16(uint16_t* p, V<float> x, int64_t n) {
  F32Bits w;
  std::memcpy(&w, &x, sizeof(w));
  const F32Bits rounded = (w + (((w >> 16) & 1u) + 0x7FFFu)) >> 16;
  const F32Bits r = x != x ? F32Bits{} + 0x7FC0u : rounded;
  const BF16Bits b = __builtin_convertvector(r, BF16Bits);
  if (n == 16)
    std::memcpy(p, &b, sizeof(b));
  else
    std::memcpy(p, &b, sizeof(uint16_t) * static_cast<size_t>(n));
}

}  // namespace seqmix::ops::cpu::SEQMIX_ISA
