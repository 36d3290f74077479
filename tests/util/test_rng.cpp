// util/rng.h: the published splitmix64 stream, and distributions that are exact and the same
// with every standard library; util/cpu.h: one answer per process.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "seqmix/util/cpu.h"
#include "seqmix/util/rng.h"

using seqmix::util::Rng;

TEST(Rng, SplitMix64MatchesTheReferenceStream) {
  // The first outputs of splitmix64 seeded with 0 (Vigna's splitmix64.c reference).
  Rng rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.next(), 0x06C45D188009454FULL);
  // A copy continues the same stream; Rng(state()) does too.
  Rng copy = rng, resumed(rng.state());
  const uint64_t a = rng.next();
  EXPECT_EQ(copy.next(), a);
  EXPECT_EQ(resumed.next(), a);
}

TEST(Rng, IntegersStayInRangeAndCoverIt) {
  Rng rng(7);
  std::array<int, 6> counts{};
  for (int i = 0; i < 60000; ++i) {
    const int64_t v = rng.uniform_int(1, 6);
    ASSERT_GE(v, 1);
    ASSERT_LE(v, 6);
    ++counts[static_cast<size_t>(v - 1)];
  }
  for (const int c : counts) EXPECT_NEAR(c, 10000, 500);  // > 5 standard deviations
  EXPECT_EQ(rng.uniform_int(3, 3), 3);
  EXPECT_EQ(rng.uniform_int(5, 2), 5);  // hi < lo returns lo
  EXPECT_EQ(rng.below(0), 0u);
  EXPECT_EQ(rng.below(1), 0u);
  // The full int64 range and a span past INT64_MAX do not overflow.
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < 100; ++i) {
    const int64_t v = rng.uniform_int(lo, hi);
    EXPECT_TRUE(v >= lo && v <= hi);
    const int64_t w = rng.uniform_int(-5, hi);
    EXPECT_GE(w, -5);
  }
}

TEST(Rng, UniformDoublesAndCoins) {
  Rng rng(11);
  double sum = 0;
  int heads = 0, hits = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    // 53 bits: u * 2^53 is a whole number.
    ASSERT_EQ(u * 0x1.0p53, static_cast<double>(static_cast<uint64_t>(u * 0x1.0p53)));
    sum += u;
    heads += rng.coin();
    hits += rng.bernoulli(0.25);
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  EXPECT_NEAR(heads, 50000, 800);
  EXPECT_NEAR(hits, 25000, 700);
  EXPECT_FALSE(rng.bernoulli(0.0));
  EXPECT_TRUE(rng.bernoulli(1.0));
  const double x = rng.uniform(-2.0, 3.0);
  EXPECT_TRUE(x >= -2.0 && x < 3.0);
}

TEST(Rng, ShuffleIsAPermutationAndDependsOnTheSeed) {
  std::vector<int> a(50), b(50);
  std::iota(a.begin(), a.end(), 0);
  b = a;
  Rng(1).shuffle(a.begin(), a.end());
  Rng(2).shuffle(b.begin(), b.end());
  EXPECT_NE(a, b);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> want(50);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(sorted, want);
  // Same seed, same order.
  std::vector<int> c(50);
  std::iota(c.begin(), c.end(), 0);
  Rng(1).shuffle(c.begin(), c.end());
  EXPECT_EQ(a, c);
}

TEST(Cpu, FeaturesAreDetectedOnceAndConsistent) {
  const auto& f = seqmix::util::cpu_features();
  EXPECT_EQ(&f, &seqmix::util::cpu_features());
  if (f.avx512_bf16) EXPECT_TRUE(f.avx512);
  EXPECT_EQ(seqmix::util::cpu_runs_avx512_kernels(), f.avx512);
}
