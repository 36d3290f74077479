#pragma once
/// @file rng.h
/// The one source of randomness for generated data and data order: splitmix64 (Steele, Lea
/// and Flood 2014, "Fast splittable pseudorandom number generators") and the distributions
/// built on it, each written out here. std::uniform_int_distribution,
/// std::uniform_real_distribution, std::bernoulli_distribution and std::shuffle leave their
/// algorithms to the standard library, so the same seed gave different data with libstdc++
/// and libc++; everything below is fully specified by this file, so a seed means the same
/// numbers with any compiler and standard library.
///
/// Example:
///   seqmix::util::Rng rng(42);
///   const int64_t die = rng.uniform_int(1, 6);   // 1..6, no modulo bias
///   const double u = rng.uniform();              // [0, 1), 53 random bits
///   if (rng.bernoulli(0.25)) { /* ... */ }
///   std::vector<int> v = {1, 2, 3, 4};
///   rng.shuffle(v.begin(), v.end());             // Fisher-Yates
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>

namespace seqmix::util {

/// splitmix64's increment: 2^64 / phi, odd, so the state visits all 2^64 values.
inline constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ULL;

/// splitmix64's output function: a bijective 64-bit mixer (also a good hash of a seed).
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// One splitmix64 step: advances `state` by the gamma and returns the mixed new state.
inline uint64_t splitmix64(uint64_t& state) { return mix64(state += kSplitMixGamma); }

/// A splitmix64 stream with the distributions seqmix uses. Copyable: a copy continues the
/// same stream independently.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  /// 64 uniformly random bits.
  uint64_t next() { return splitmix64(state_); }

  /// Uniform in [0, n) for n > 0 (0 for n = 0), by rejection: draws below 2^64 mod n are
  /// redrawn, so each of the n values has exactly the same number of 64-bit preimages. Less
  /// than one redraw in 2^32 for n < 2^32.
  uint64_t below(uint64_t n) {
    if (n == 0) return 0;
    const uint64_t reject = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t x = next();
      if (x >= reject) return x % n;
    }
  }

  /// Uniform in [lo, hi], both included (lo <= hi; hi < lo returns lo). Any int64_t range,
  /// the full one included.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    // Unsigned arithmetic: hi - lo may exceed INT64_MAX, and wraps to the right offset.
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
    const uint64_t offset = span == 0 ? next() : below(span);
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + offset);
  }

  /// Uniform in [0, 1): the top 53 bits of one draw, times 2^-53 (every double in the range
  /// that is a multiple of 2^-53, equally likely; exact, no rounding).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// lo + (hi - lo) * uniform(): in [lo, hi) up to rounding of the product.
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  /// True with probability p (p <= 0 never, p >= 1 always): uniform() < p, so one draw.
  bool bernoulli(double p) { return uniform() < p; }

  /// A fair coin: the top bit of one draw.
  bool coin() { return (next() >> 63) != 0; }

  /// Fisher-Yates from the back: for i = n .. 2, element i - 1 swaps with a uniform one of
  /// the first i (possibly itself). Random-access iterators.
  template <class It>
  void shuffle(It first, It last) {
    const auto n = static_cast<uint64_t>(std::distance(first, last));
    for (uint64_t i = n; i > 1; --i) {
      using std::swap;
      swap(first[static_cast<std::ptrdiff_t>(i - 1)],
           first[static_cast<std::ptrdiff_t>(below(i))]);
    }
  }

  /// The state, so that a stream can be saved and continued (Rng(state()) continues it).
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

}  // namespace seqmix::util
