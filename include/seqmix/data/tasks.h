#pragma once
/// @file tasks.h
/// The Long Range Arena-style classification tasks (Tay et al. 2020; docs/TASKS.md), built
/// from installable data, behind one name each:
///   listops     ListOps, generated (data/listops.h): 10 classes, <= 2000 tokens, vocab 16
///   text        spam vs ham, SpamAssassin message bodies as bytes (data/text_tasks.h)
///   retrieval   "same president?" on pairs of State of the Union passages, bytes, two towers
///               (data/text_tasks.h)
///   image       Fashion-MNIST as 784 pixel tokens (data/fashion_mnist.h)
///   pathfinder  32 x 32 Pathfinder images as 1024 pixel tokens (data/pathfinder.h)
///   pathx       128 x 128 Path-X images as 16384 pixel tokens (data/pathfinder.h)
#include <cstdint>
#include <string>
#include <vector>

#include "seqmix/data/labelled.h"

namespace seqmix::data {

/// What a model needs to know about a task.
struct TaskInfo {
  std::string name;
  int64_t vocab_size;  ///< token ids are in [0, vocab_size)
  int64_t n_classes;
  int64_t max_len;     ///< longest sequence the task produces (per tower for pair tasks)
  bool pair;           ///< examples are pairs (tokens, tokens_b), classified two-tower
  std::string summary;
};

/// Every task, in LRA's order.
const std::vector<TaskInfo>& task_infos();
/// @throws std::invalid_argument naming `name` and listing the tasks.
const TaskInfo& task_info(const std::string& name);

/// Which data to build. Sizes of 0 take the task's default (docs/TASKS.md); for generated
/// tasks (listops, pathfinder, pathx) they set how many examples are generated, for
/// corpora (text, retrieval, image) a positive size keeps only the first examples of a
/// split (retrieval: the number of pairs drawn).
struct TaskSpec {
  std::string name;
  /// The folder scripts/setup.sh fills, as data.dir: "" = the default lookup
  /// (data/byte_corpus.h, resolve_data_dir). Only text, retrieval and image read it.
  std::string dir;
  uint64_t seed = 0;         ///< data seed (generation, splits), separate from the model's
  int64_t train = 0, valid = 0, test = 0;
  /// The model's longest sequence (0: the task's own max_len). Text cuts bodies and
  /// Retrieval draws passages of min(max_len, the task's) bytes, so a shorter model sees
  /// whole passages rather than the first part of longer ones; other tasks ignore it
  /// (longer examples are cut when batched).
  int64_t max_len = 0;
  /// Pathfinder / Path-X only: dashes per target path (0: pathfinder_options' default) and
  /// distractor paths (-1: the default).
  int32_t pathfinder_dashes = 0, pathfinder_distractors = -1;
  /// Pathfinder / Path-X only: image side in pixels (0: 32 for pathfinder, 128 for pathx).
  int32_t pathfinder_resolution = 0;
  /// Retrieval only: SotuRetrievalOptions::negative_neighbours (-1: its default, 2).
  int32_t retrieval_negative_neighbours = -1;
};

struct TaskData {
  TaskInfo info;
  LabelledSplits splits;
  std::string description;  ///< one line: sizes and where the data came from
};

/// Builds or loads a task's three splits. Deterministic for equal specs.
/// @throws std::invalid_argument for an unknown task or negative sizes; std::runtime_error
///         naming the file or folder when installed data is missing (saying where the data
///         folder was looked for), corrupt, or holds something other than regular files.
TaskData load_task(const TaskSpec& spec);

}  // namespace seqmix::data
