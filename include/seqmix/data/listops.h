#pragma once
/// @file listops.h
/// ListOps as the Long Range Arena builds it (Tay et al. 2020, "Long Range Arena", Sec. 3.1;
/// the generator lra_benchmarks/data/listops.py, itself after Nangia & Bowman 2018), generated
/// here deterministically from a seed. A sequence is a nested expression such as
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
  uint64_t seed = 0;
};

using ListOpsData = LabelledSplits;

/// Generates the three splits. Deterministic for equal options.
/// @throws std::invalid_argument naming the option for sizes < 0, max_args < 2,
///         max_depth < 1 or min_length >= max_length - 1.
ListOpsData generate_listops(const ListOpsOptions& options);

/// The readable form of a ListOps sequence, tokens separated by spaces ("[MAX 2 9 ]").
/// @throws std::invalid_argument for a token outside the vocabulary.
std::string listops_to_string(const std::vector<int32_t>& tokens);

}  // namespace seqmix::data
