#pragma once
/// @file classify.h
/// Classification on the labelled tasks (data/tasks.h): batching with padding masks, the
/// per-epoch example order, and accuracy over a split. The training loop is train() in
/// trainer.h (a run whose config names data.task).
#include <cstdint>
#include <string>
#include <vector>

#include "seqmix/data/labelled.h"
#include "seqmix/data/tasks.h"
#include "seqmix/models/sequence_model.h"
#include "seqmix/train/evaluate.h"
#include "seqmix/train/configuration/config.h"

namespace seqmix::train {

/// The task data a run configuration names (data.task, data.dir, data.task_seed, the
/// example counts, model.max_len): what training and `seqmix eval` load.
data::TaskSpec task_spec(const RunConfig& config);

/// A padded batch. tokens [B, L] int64 (padding id 0), mask [B, L] bool (true = valid),
/// labels [B] int64; for pair tasks tokens_b / mask_b [B, L_b] (undefined otherwise).
/// L is the longest example of the batch rounded up to a multiple of pad_to_multiple, at most
/// max_len; longer examples keep their first max_len tokens.
struct ClassBatch {
  at::Tensor tokens, mask, tokens_b, mask_b, labels;
};

/// @throws std::invalid_argument for an empty batch, max_len < 1, pad_to_multiple < 1 or an
///         example with no tokens (nothing to pool).
ClassBatch collate(const std::vector<const data::LabelledSequence*>& examples, int64_t max_len,
                   int64_t pad_to_multiple = 1);

/// `batch`'s tensors on `device` (undefined ones stay undefined).
ClassBatch to_device(const ClassBatch& batch, const c10::Device& device);

/// Class logits [B, n_classes] of a batch (two-tower for cls_pair models), computed on the
/// model's device (the batch is moved there).
at::Tensor class_logits(models::SequenceModel& model, const ClassBatch& batch);

/// The training order: epoch e visits the n examples in a permutation drawn from (seed, e)
/// (Fisher-Yates over util::splitmix64, the same on every platform); step s takes the batch
/// consecutive entries starting at s * batch, running on into the next epoch. A function of
/// the step alone, so a resumed run sees the batches the uninterrupted one would have.
class EpochOrder {
 public:
  /// @throws std::invalid_argument if n < 1 or batch < 1.
  EpochOrder(int64_t n, int64_t batch, uint64_t seed);
  std::vector<int64_t> batch(int64_t step);

 private:
  const std::vector<int64_t>& permutation(int64_t epoch);
  int64_t n_, batch_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

struct AccuracyResult {
  double loss = 0;      ///< mean cross-entropy, nats per example
  double accuracy = 0;  ///< fraction of examples whose arg-max class is the label
  int64_t examples = 0;
  double seconds = 0;
  /// The chance level a reader compares `accuracy` with: the fraction of the scored examples
  /// whose label is the most frequent label among them (what always answering that class
  /// scores).
  double majority = 0;
};

/// Scores the first `max_examples` examples of `split` (0 = all) with the training objective
/// (classification_loss in objective.h, summed in double) in eval mode without gradients,
/// batch_size at a time (examples grouped by length to pad little; the result does not depend
/// on the grouping, nor on pad_to_multiple, see collate).
/// @throws std::invalid_argument if batch_size < 1 or the split is empty.
/// `on_progress(done, total)`, if given, is called after each batch with examples scored.
/// `group`: sharded over a data-parallel run's ranks by batch, as evaluate() in evaluate.h.
AccuracyResult evaluate_classifier(models::SequenceModel& model,
                                   const std::vector<data::LabelledSequence>& split,
                                   int64_t batch_size, int64_t max_examples = 0,
                                   int64_t pad_to_multiple = 1,
                                   const EvalProgressFn& on_progress = {},
                                   dist::ProcessGroup* group = nullptr);

}  // namespace seqmix::train
