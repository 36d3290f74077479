#include "seqmix/train/objective.h"

#include <stdexcept>

#include "seqmix/dist/process_group.h"
#include "seqmix/util/device.h"
#include <cmath>
#include <string>

namespace seqmix::train {

namespace {

at::Reduction::Reduction aten(LossReduction r) {
  return r == LossReduction::kSum ? at::Reduction::Sum : at::Reduction::Mean;
}

}  // namespace

BatchLoss language_model_loss(models::SequenceModel& model, const at::Tensor& host_batch,
                              LossReduction reduction) {
  if (!host_batch.defined() || host_batch.dim() != 2 || host_batch.scalar_type() != at::kLong ||
      host_batch.size(1) < 2)
    throw std::invalid_argument(
        "language_model_loss: expected int64 token ids [B, L + 1] with L >= 1, got " +
        (host_batch.defined() ? std::string(c10::str(host_batch.sizes())) + " " +
                                    std::string(c10::toString(host_batch.scalar_type()))
                              : std::string("an undefined tensor")));
  const at::Tensor batch = host_batch.to(util::module_device(*model));
  const int64_t L = batch.size(1) - 1;
  // Float32 logits: under train.precision = bf16 the head's matrix product returns bfloat16,
  // and the loss (log-sum-exp over the vocabulary) is computed in float32 (nn/precision.h).
  const at::Tensor logits = model->forward(batch.narrow(1, 0, L)).to(at::kFloat);
  BatchLoss out;
  out.loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                    batch.narrow(1, 1, L).reshape({-1}), {}, aten(reduction));
  out.count = batch.size(0) * L;
  return out;
}

BatchLoss classification_loss(models::SequenceModel& model, const ClassBatch& batch,
                              LossReduction reduction) {
  const at::Tensor logits = class_logits(model, batch).to(at::kFloat);
  BatchLoss out;
  const at::Tensor labels = batch.labels.to(logits.device());
  out.loss = at::cross_entropy_loss(logits, labels, {}, aten(reduction));
  out.count = labels.size(0);
  out.correct = logits.detach().argmax(-1).eq(labels).sum().item<int64_t>();
  return out;
}

void LossTotals::add(const BatchLoss& batch) {
  nll += batch.loss.item<double>();
  count += batch.count;
  correct += batch.correct;
}

double LossTotals::mean() const { return count > 0 ? nll / static_cast<double>(count) : 0.0; }

double LossTotals::accuracy() const {
  return count > 0 ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
}

void all_reduce_totals(LossTotals& totals, dist::ProcessGroup& group) {
  // Doubles hold the counts exactly up to 2^53.
  at::Tensor v = at::tensor({totals.nll, static_cast<double>(totals.count),
                             static_cast<double>(totals.correct)},
                            at::kDouble);
  group.all_reduce_sum(v, "the evaluation's totals");
  const double* p = v.data_ptr<double>();
  totals.nll = p[0];
  totals.count = static_cast<int64_t>(std::llround(p[1]));
  totals.correct = static_cast<int64_t>(std::llround(p[2]));
}

}  // namespace seqmix::train
