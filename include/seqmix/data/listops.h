#pragma once
/// @file listops.h
/// ListOps as the Long Range Arena builds it (Tay et al. 2020, "Long Range Arena", Sec. 3.1;
/// the generator lra_benchmarks/data/listops.py, itself after Nangia & Bowman 2018), generated
/// here deterministically from a seed, with util::Rng (util/rng.h), so that a seed gives the
/// same trees with every compiler and standard library (seqmix 0.1.0 drew them with
/// <random>'s distributions, whose algorithms are implementation-defined, so libstdc++ and
/// libc++ builds made different data; the trees changed with util::Rng, their distribution
/// did not). A sequence is a nested expression such as
///   [MAX 2 9 [MIN 4 7 ] 0 ]   -> 9
/// over the operators MAX, MIN, MED (the median, rounded down) and SM (sum modulo 10) and the
/// digits 0..9; the label is its value (10 classes).
/// Generation, as LRA's: a node at depth < max_depth is an operator with probability 0.25
/// (else a digit; at max_depth always a digit), an operator takes 2..max_args arguments
/// (uniform), operator and digits uniform; a tree is kept if min_length < tokens < max_length
/// (tokens: operators, digits and closing brackets) and it was not drawn before. Splits are
/// consecutive runs of the accepted trees: train, then validation, then test.
#include <cstdint>
#include <string>
#include <vector>

#include "seqmix/data/labelled.h"

namespace seqmix::data {

/// ListOps vocabulary: 0 is padding, digits d are d + 1, then the operators and "]".
namespace listops {
constexpr int32_t kPad = 0, kDigit0 = 1, kMin = 11, kMax = 12, kMed = 13, kSumMod = 14, kEnd = 15;
constexpr int32_t kVocabSize = 16;
constexpr int32_t kClasses = 10;
}  // namespace listops

struct ListOpsOptions {
  int64_t train = 96000, valid = 2000, test = 2000;  ///< LRA's sizes
  int32_t max_depth = 10, max_args = 10;
  int64_t min_length = 500, max_length = 2000;  ///< exclusive bounds on the token count
  int64_t seed = 0;  ///< >= 0 (signed, so that a command line's -1 is caught, not wrapped)

  /// Upper bounds checked by `validate` (LRA: 10, 10, 2000 and 100,000 sequences). They keep
  /// a mistyped value from exhausting memory or running for hours.
  static constexpr int32_t kMaxDepth = 1000, kMaxArgs = 1000;
  static constexpr int64_t kMaxLength = 1000000;        ///< tokens per sequence
  static constexpr int64_t kMaxSequences = 100000000;   ///< per split
  /// (train + valid + test) * (max_length - 1): the most tokens the splits may hold; each
  /// is kept twice while generating (4 bytes each), so at most ~4 GB.
  static constexpr int64_t kMaxTotalTokens = 500000000;
  /// Draws in a row that add no tree before generation gives up: a length range that almost
  /// no tree reaches, or fewer distinct trees than requested. Measured (seed 0): LRA's
  /// settings need 12 draws per tree (longest run without one over 100,000 trees: 133);
  /// max_depth 25 needs 4,400 (longest run over 1,000 trees: 39,000); max_depth 30 needs
  /// 51,000 (longest run 477,000).
  static constexpr int64_t kMaxFailedDraws = 1000000;
  /// Tokens drawn in a row that add no tree before generation gives up (about 1.5-2.5 s of
  /// drawing), or kFailedTokensPerTree times the mean tokens drawn per tree so far if that is
  /// more. A draw stops at max_length tokens, but with many arguments and deep trees almost
  /// every draw grows that far: max_depth 1000, max_args 1000 draws 10^6 tokens in a quarter
  /// of the draws and reaches 10 < tokens < 10^6 about once in 8,400 (seed 0, 12 trees:
  /// 2 * 10^9 tokens per tree, longest run 23,000 draws and 5.8 * 10^9 tokens; an earlier
  /// measurement with the 0.1.0 generator said once in 15,000). Measured longest runs
  /// (seed 0): LRA's settings 12,900 tokens over 100,000 trees; max_depth 25 11 million over
  /// 1,000 (1.28 million per tree on average); max_depth 30 138 million over 1,000 (14.8
  /// million per tree, which the second bound covers).
  static constexpr int64_t kMaxFailedTokens = 100000000;
  static constexpr int64_t kFailedTokensPerTree = 32;
};

using ListOpsData = LabelledSplits;

/// Checks every option against the bounds above and that the length range is reachable at
/// all (the longest tree that max_depth and max_args allow is longer than min_length + 1).
/// @throws std::invalid_argument naming the option ("`max_depth` must be in [1, 1000], got
///         0"; the command line names its flag) with the accepted range and the value given.
void validate(const ListOpsOptions& options);

/// The token count of the longest tree that max_depth and max_args allow (every node above
/// the last level an operator with max_args arguments), or `cap` if that is more.
int64_t listops_max_tokens(int32_t max_depth, int32_t max_args, int64_t cap);

/// Generates the three splits, iteratively (no recursion, whatever the depth). Deterministic
/// for equal options.
/// @throws std::invalid_argument as `validate`, or when kMaxFailedDraws draws or
///         kMaxFailedTokens tokens (see there) in a row add no tree: the length range is
///         practically unreachable, or fewer distinct trees exist than requested. The message
///         names the options and says how many of those draws were too short, too long or
///         repeats.
ListOpsData generate_listops(const ListOpsOptions& options);

/// The readable form of a ListOps sequence, tokens separated by spaces ("[MAX 2 9 ]").
/// @throws std::invalid_argument for a token outside the vocabulary.
std::string listops_to_string(const std::vector<int32_t>& tokens);

}  // namespace seqmix::data
