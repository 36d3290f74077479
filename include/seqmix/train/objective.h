#pragma once
/// @file objective.h
/// What a model is trained and scored on, computed in one place for training steps
/// (trainer.h) and evaluation (evaluate.h, classify.h): the cross-entropy of a batch and the
/// counts behind the figures reported from it (tokens behind bits per character and
/// perplexity, right answers behind accuracy).
///
/// Example:
///   const at::Tensor batch = data::sample_batch(tokens, 8, 64, seed, step);  // [8, 65]
///   const BatchLoss l = language_model_loss(model, batch);
///   l.loss.backward();  // mean nats per predicted token
#include <cstdint>

#include "seqmix/models/sequence_model.h"
#include "seqmix/train/classify.h"

namespace seqmix::train {

/// How a batch's per-target cross-entropies are combined into BatchLoss::loss.
enum class LossReduction {
  kMean,  ///< the mean over the batch's targets: what a training step backpropagates
  kSum,   ///< the sum: what an evaluation adds up over batches before dividing once
};

/// The objective on one batch.
struct BatchLoss {
  /// Cross-entropy in nats, a 0-dim float tensor attached to the autograd graph when
  /// gradients are enabled; the mean or sum over `count` targets (LossReduction).
  at::Tensor loss;
  int64_t count = 0;    ///< targets scored: tokens predicted, or examples classified
  int64_t correct = 0;  ///< classification: examples whose arg-max class is the label
                        ///< (language modelling: 0, not counted)
};

/// Next-token prediction. `batch` [B, L + 1] int64 token ids: the model reads columns
/// 0..L-1 of every row and is scored on predicting columns 1..L (count = B * L). The model
/// must be causal for the loss to mean anything (an encoder sees the token it predicts).
/// @throws std::invalid_argument if `batch` is not 2-D int64 with at least two columns.
BatchLoss language_model_loss(models::SequenceModel& model, const at::Tensor& batch,
                              LossReduction reduction = LossReduction::kMean);

/// Classification of a padded batch (collate in classify.h): one sequence per example, or
/// two for a pair classifier (model.cls_pair: both towers, batch.tokens_b and mask_b).
/// count = B, and `correct` counts arg-max hits (ties go to the lower class index).
/// @throws c10::Error if a pair classifier gets a batch without second sequences.
BatchLoss classification_loss(models::SequenceModel& model, const ClassBatch& batch,
                              LossReduction reduction = LossReduction::kMean);

/// Totals of an evaluation over many batches, each added with LossReduction::kSum; sums are
/// kept in double so that long splits do not lose precision in float.
struct LossTotals {
  double nll = 0;       ///< summed cross-entropy, nats
  int64_t count = 0;    ///< targets
  int64_t correct = 0;  ///< classification: right answers
  /// Adds a batch scored with LossReduction::kSum.
  void add(const BatchLoss& batch);
  /// nll / count (0 when nothing was scored).
  double mean() const;
  /// correct / count (0 when nothing was scored).
  double accuracy() const;
};

/// Adds every rank's totals (a data-parallel evaluation, each rank having scored its share).
/// @throws dist::PeerLost if a rank is lost.
void all_reduce_totals(LossTotals& totals, dist::ProcessGroup& group);

}  // namespace seqmix::train
