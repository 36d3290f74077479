// ListOps generator (include/seqmix/data/listops.h): determinism, LRA's length and size
// rules, and every label checked by an evaluator written independently of the generator (a
// stack machine over the token sequence, not the generator's recursion).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "seqmix/data/listops.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace {

using seqmix::data::LabelledSequence;
using seqmix::data::ListOpsOptions;
namespace lo = seqmix::data::listops;

// Evaluates a ListOps token sequence with an explicit stack; -1 if malformed.
int evaluate(const std::vector<int32_t>& tokens) {
  struct Frame {
    int32_t op;
    std::vector<int> args;
  };
  std::vector<Frame> stack;
  int result = -1;
  auto deliver = [&](int v) {
    if (stack.empty()) {
      if (result != -1) return false;  // two top-level values
      result = v;
    } else {
      stack.back().args.push_back(v);
    }
    return true;
  };
  for (int32_t t : tokens) {
    if (t >= lo::kDigit0 && t < lo::kDigit0 + 10) {
      if (!deliver(t - lo::kDigit0)) return -1;
    } else if (t >= lo::kMin && t <= lo::kSumMod) {
      stack.push_back({t, {}});
    } else if (t == lo::kEnd) {
      if (stack.empty() || stack.back().args.empty()) return -1;
      Frame f = std::move(stack.back());
      stack.pop_back();
      std::vector<int>& a = f.args;
      std::sort(a.begin(), a.end());
      int v = 0;
      if (f.op == lo::kMin) v = a.front();
      if (f.op == lo::kMax) v = a.back();
      if (f.op == lo::kMed) {
        const size_t n = a.size();
        // numpy.median then int(): the mean of the middle pair, truncated.
        v = n % 2 ? a[n / 2] : static_cast<int>((a[n / 2 - 1] + a[n / 2]) / 2.0);
      }
      if (f.op == lo::kSumMod) {
        for (int x : a) v += x;
        v %= 10;
      }
      if (!deliver(v)) return -1;
    } else {
      return -1;
    }
  }
  return stack.empty() ? result : -1;
}

ListOpsOptions small() {
  ListOpsOptions o;
  o.train = 1500;
  o.valid = 100;
  o.test = 100;
  o.min_length = 20;
  o.max_length = 300;
  o.seed = 5;
  return o;
}

TEST(ListOps, EveryLabelMatchesAnIndependentEvaluator) {
  const auto d = seqmix::data::generate_listops(small());
  std::vector<int> classes(10, 0);
  for (const auto* split : {&d.train, &d.valid, &d.test})
    for (const LabelledSequence& s : *split) {
      ASSERT_EQ(evaluate(s.tokens), s.label) << seqmix::data::listops_to_string(s.tokens);
      ++classes[static_cast<size_t>(s.label)];
    }
  for (int c = 0; c < 10; ++c) EXPECT_GT(classes[static_cast<size_t>(c)], 0) << "class " << c;
}

TEST(ListOps, SizesLengthsDepthAndNoDuplicates) {
  const ListOpsOptions o = small();
  const auto d = seqmix::data::generate_listops(o);
  EXPECT_EQ(static_cast<int64_t>(d.train.size()), o.train);
  EXPECT_EQ(static_cast<int64_t>(d.valid.size()), o.valid);
  EXPECT_EQ(static_cast<int64_t>(d.test.size()), o.test);
  std::set<std::vector<int32_t>> all;
  for (const auto* split : {&d.train, &d.valid, &d.test})
    for (const auto& s : *split) {
      const auto n = static_cast<int64_t>(s.tokens.size());
      EXPECT_GT(n, o.min_length);
      EXPECT_LT(n, o.max_length);
      EXPECT_TRUE(all.insert(s.tokens).second) << "duplicate sequence";
      int depth = 0, max_depth = 0;
      for (int32_t t : s.tokens) {
        if (t >= lo::kMin && t <= lo::kSumMod) max_depth = std::max(max_depth, ++depth);
        if (t == lo::kEnd) --depth;
      }
      EXPECT_LE(max_depth + 1, o.max_depth) << "digits sit one level below their operator";
    }
}

TEST(ListOps, DeterministicFromTheSeed) {
  const auto a = seqmix::data::generate_listops(small());
  const auto b = seqmix::data::generate_listops(small());
  ASSERT_EQ(a.train.size(), b.train.size());
  for (size_t i = 0; i < a.train.size(); ++i) {
    ASSERT_EQ(a.train[i].tokens, b.train[i].tokens);
    ASSERT_EQ(a.train[i].label, b.train[i].label);
  }
  ListOpsOptions o = small();
  o.seed = 6;
  EXPECT_NE(seqmix::data::generate_listops(o).train[0].tokens, a.train[0].tokens);
}

// The generator draws from util::Rng alone, so a seed gives these trees with any compiler and
// standard library. Before, std::mt19937_64 with <random>'s distributions drew a different
// first tree for this seed with libc++ ([MED 0 8 8 7 6 ...] -> 6) than with libstdc++
// ([MAX 3 2 9 0 6 9 ...] -> 9). The values below were computed with this generator and are
// the same built against libstdc++ and libc++.
TEST(ListOps, SameTreesWithEveryStandardLibrary) {
  const auto d = seqmix::data::generate_listops(small());
  EXPECT_EQ(seqmix::data::listops_to_string(d.train[0].tokens),
            "[MAX 0 7 3 [SM [MIN 0 3 1 6 ] 1 ] 5 4 [MED 5 8 7 7 [SM 2 4 [MAX 8 2 5 2 ] ] 9 "
            "[MIN 8 2 ] 6 ] 4 ]");
  EXPECT_EQ(d.train[0].label, 7);
  uint64_t h = 1469598103934665603ull;  // FNV-1a over every token and label, split by split
  int64_t tokens = 0;
  std::vector<int> classes(10, 0);
  for (const auto* split : {&d.train, &d.valid, &d.test})
    for (const LabelledSequence& s : *split) {
      tokens += static_cast<int64_t>(s.tokens.size());
      for (int32_t t : s.tokens) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
      h = (h ^ static_cast<uint64_t>(s.label)) * 1099511628211ull;
    }
  for (const LabelledSequence& s : d.train) ++classes[static_cast<size_t>(s.label)];
  EXPECT_EQ(tokens, 209710);
  EXPECT_EQ(h, 0x542a1034ea9c3070ull);
  EXPECT_EQ(classes, (std::vector<int>{216, 147, 121, 112, 150, 140, 123, 110, 164, 217}));
}

// LRA's own length range (500 < tokens < 2000) at a small sample size.
TEST(ListOps, LraLengthRange) {
  ListOpsOptions o;
  o.train = 40;
  o.valid = 5;
  o.test = 5;
  o.seed = 1;
  const auto d = seqmix::data::generate_listops(o);
  for (const auto& s : d.train) {
    EXPECT_GT(s.tokens.size(), 500u);
    EXPECT_LT(s.tokens.size(), 2000u);
    EXPECT_EQ(evaluate(s.tokens), s.label);
  }
}

TEST(ListOps, ReadableForm) {
  const std::vector<int32_t> t = {lo::kMax, lo::kDigit0 + 2, lo::kDigit0 + 9, lo::kMin,
                                  lo::kDigit0 + 4, lo::kDigit0 + 7, lo::kEnd, lo::kDigit0, lo::kEnd};
  EXPECT_EQ(seqmix::data::listops_to_string(t), "[MAX 2 9 [MIN 4 7 ] 0 ]");
  EXPECT_EQ(evaluate(t), 9);
  EXPECT_THROW(seqmix::data::listops_to_string({99}), std::invalid_argument);
}

// The error message `generate_listops` gives for `o` ("" if none).
std::string error_of(const ListOpsOptions& o) {
  try {
    seqmix::data::generate_listops(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ListOps, EveryBadOptionIsNamed) {
  struct Case {
    const char* expect;  // in the message
    std::function<void(ListOpsOptions&)> set;
  };
  const std::vector<Case> cases = {
      {"`train`", [](ListOpsOptions& o) { o.train = -1; }},
      {"`valid`", [](ListOpsOptions& o) { o.valid = -5; }},
      {"`test`", [](ListOpsOptions& o) { o.test = -1; }},
      {"`train`", [](ListOpsOptions& o) { o.train = ListOpsOptions::kMaxSequences + 1; }},
      {"nothing to generate", [](ListOpsOptions& o) { o.train = o.valid = o.test = 0; }},
      {"`max_depth` must be in [1, 1000], got 100000",
       [](ListOpsOptions& o) { o.max_depth = 100000; }},
      {"`max_depth`", [](ListOpsOptions& o) { o.max_depth = 0; }},
      {"`max_depth`", [](ListOpsOptions& o) { o.max_depth = -3; }},
      {"`max_args`", [](ListOpsOptions& o) { o.max_args = 1; }},
      {"`max_args`", [](ListOpsOptions& o) { o.max_args = 1000000; }},
      {"`max_length`", [](ListOpsOptions& o) { o.max_length = -1; }},
      {"`max_length`",
       [](ListOpsOptions& o) { o.max_length = ListOpsOptions::kMaxLength + 1; }},
      {"`min_length`", [](ListOpsOptions& o) { o.min_length = -1; }},
      {"`min_length`", [](ListOpsOptions& o) { o.min_length = 300; }},
      {"`min_length`", [](ListOpsOptions& o) { o.min_length = 299; }},
      {"`seed` must be >= 0, got -1", [](ListOpsOptions& o) { o.seed = -1; }},
      // Memory: 10^7 sequences of up to 10^5 tokens.
      {"lower `train`/`valid`/`test` or `max_length`",
       [](ListOpsOptions& o) {
         o.train = 10000000;
         o.max_length = 100000;
       }},
      // No tree of depth 1 (a digit) is longer than 500 tokens: refused before drawing.
      {"the longest has 1 tokens",
       [](ListOpsOptions& o) {
         o.max_depth = 1;
         o.min_length = 500;
         o.max_length = 2000;
       }},
      // Depth 3, two arguments: at most 2 + 2 * (2 + 2 * 1) = 10 tokens.
      {"the longest has 10 tokens",
       [](ListOpsOptions& o) {
         o.max_depth = 3;
         o.max_args = 2;
         o.min_length = 10;
       }},
  };
  for (const Case& c : cases) {
    ListOpsOptions o = small();
    c.set(o);
    const std::string msg = error_of(o);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in '"
                                                     << msg << "'";
    EXPECT_EQ(msg.rfind("listops: ", 0), 0u) << msg;
    EXPECT_THROW(seqmix::data::validate(o), std::invalid_argument) << c.expect;
  }
  EXPECT_NO_THROW(seqmix::data::validate(small()));
  EXPECT_NO_THROW(seqmix::data::validate(ListOpsOptions{}));  // LRA's settings
}

TEST(ListOps, LongestTree) {
  EXPECT_EQ(seqmix::data::listops_max_tokens(1, 10, 5000), 1);
  EXPECT_EQ(seqmix::data::listops_max_tokens(2, 10, 5000), 12);    // [op d*10 ]
  EXPECT_EQ(seqmix::data::listops_max_tokens(3, 2, 5000), 10);     // 2 + 2 * 4
  EXPECT_EQ(seqmix::data::listops_max_tokens(10, 10, 5000), 5000);  // capped
  EXPECT_EQ(seqmix::data::listops_max_tokens(1000, 1000, 1000000), 1000000);
}

// A length range that some trees reach, but fewer distinct trees exist than requested (10
// digits and 400 two-argument trees): an error after the draws stop adding trees, not a loop
// for ever.
TEST(ListOps, TooFewDistinctTreesIsAnErrorNotAHang) {
  ListOpsOptions o;
  o.max_depth = 2;
  o.max_args = 2;
  o.min_length = 0;
  o.max_length = 5;
  o.train = 1000;
  o.valid = o.test = 0;
  const std::string msg = error_of(o);
  EXPECT_NE(msg.find("draws in a row gave no new tree"), std::string::npos) << msg;
  EXPECT_NE(msg.find("after 410 of 1000"), std::string::npos) << msg;
  o.train = 410;  // exactly all of them
  EXPECT_EQ(static_cast<int64_t>(seqmix::data::generate_listops(o).train.size()), 410);
}

// Deep trees with many arguments (each operator has 501 arguments on average, a quarter of
// them operators again) grow to max_length in a quarter of the draws and almost never land
// in a length range: before the token limit, one of these ran for hours (a draw of up to
// 10^6 tokens, 10^6 draws). Now an error naming the options, with why the draws failed.
TEST(ListOps, TreesThatOutgrowMaxLengthAreAnErrorNotAnHour) {
  for (int64_t min_length : {int64_t{999990}, int64_t{10}}) {
    ListOpsOptions o;
    o.train = o.valid = o.test = 1;
    o.max_depth = ListOpsOptions::kMaxDepth;
    o.max_args = ListOpsOptions::kMaxArgs;
    o.min_length = min_length;
    o.max_length = ListOpsOptions::kMaxLength;
    ASSERT_NO_THROW(seqmix::data::validate(o)) << "inside validate's bounds";
    const std::string msg = error_of(o);
    EXPECT_EQ(msg.rfind("listops: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("draws in a row gave no new tree"), std::string::npos) << msg;
    for (const std::string& part :
         {"`min_length` " + std::to_string(min_length), std::string("`max_length` 1000000"),
          std::string("`max_depth` 1000"), std::string("`max_args` 1000"),
          std::string("after 0 of 3"), std::string(" too long")})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(ListOps, DeepTreesWithoutRecursion) {
  ListOpsOptions o;
  o.max_depth = ListOpsOptions::kMaxDepth;
  o.max_args = 6;
  o.min_length = 5000;
  o.max_length = 200000;
  o.train = 5;
  o.valid = o.test = 0;
  o.seed = 2;
  const auto d = seqmix::data::generate_listops(o);
  ASSERT_EQ(d.train.size(), 5u);
  int deepest = 0;
  for (const auto& s : d.train) {
    EXPECT_EQ(evaluate(s.tokens), s.label);
    int depth = 0;
    for (int32_t t : s.tokens) {
      if (t >= lo::kMin && t <= lo::kSumMod) deepest = std::max(deepest, ++depth);
      if (t == lo::kEnd) --depth;
    }
  }
  EXPECT_GT(deepest, 40);
}
}  // namespace
