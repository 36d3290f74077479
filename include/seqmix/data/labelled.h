#pragma once
/// @file labelled.h
/// Labelled sequences: the examples of the classification tasks (Long Range Arena style,
/// docs/TASKS.md). A task's tokens are ids in [0, vocab_size); 0 is padding where a task
/// pads (ListOps, Pathfinder draw 0 as black, which is never padding: masks, not token
/// values, mark padding in seqmix).
#include <cstdint>
#include <vector>

namespace seqmix::data {

/// One labelled example. `tokens_b` is empty except for pair tasks (Retrieval), where the
/// two sequences are encoded separately (two-tower) and classified together.
struct LabelledSequence {
  std::vector<int32_t> tokens;
  int32_t label = 0;
  std::vector<int32_t> tokens_b;
};

/// A task's three splits.
struct LabelledSplits {
  std::vector<LabelledSequence> train, valid, test;
};

}  // namespace seqmix::data
