#include "seqmix/train/classify.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <stdexcept>

#include "seqmix/dist/process_group.h"
#include "seqmix/train/objective.h"

#include "seqmix/util/device.h"
#include "seqmix/util/rng.h"

namespace seqmix::train {

namespace {

using util::splitmix64;

// Pads one side of the batch: ids [B, L] and mask [B, L].
void pad(const std::vector<const std::vector<int32_t>*>& seqs, int64_t max_len,
         int64_t multiple, at::Tensor& ids, at::Tensor& mask) {
  int64_t L = 0;
  for (const auto* s : seqs) {
    if (s->empty()) throw std::invalid_argument("collate: an example has no tokens");
    L = std::max<int64_t>(L, static_cast<int64_t>(s->size()));
  }
  L = std::min(max_len, (L + multiple - 1) / multiple * multiple);
  const int64_t B = static_cast<int64_t>(seqs.size());
  ids = at::zeros({B, L}, at::kLong);
  mask = at::zeros({B, L}, at::kBool);
  auto id = ids.accessor<int64_t, 2>();
  auto m = mask.accessor<bool, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& s = *seqs[static_cast<size_t>(b)];
    const int64_t n = std::min<int64_t>(L, static_cast<int64_t>(s.size()));
    for (int64_t i = 0; i < n; ++i) {
      id[b][i] = s[static_cast<size_t>(i)];
      m[b][i] = true;
    }
  }
}

}  // namespace

data::TaskSpec task_spec(const RunConfig& config) {
  const auto& d = config.data;
  data::TaskSpec spec;
  spec.name = d.task;
  spec.dir = d.dir;
  spec.seed = static_cast<uint64_t>(d.task_seed);
  spec.train = d.train_examples;
  spec.valid = d.valid_examples;
  spec.test = d.test_examples;
  spec.max_len = config.model.max_len;
  spec.pathfinder_dashes = static_cast<int32_t>(d.pathfinder_dashes);
  spec.pathfinder_distractors = static_cast<int32_t>(d.pathfinder_distractors);
  spec.pathfinder_resolution = static_cast<int32_t>(d.pathfinder_resolution);
  spec.retrieval_negative_neighbours = static_cast<int32_t>(d.retrieval_negative_neighbours);
  return spec;
}

ClassBatch collate(const std::vector<const data::LabelledSequence*>& examples, int64_t max_len,
                   int64_t pad_to_multiple) {
  if (examples.empty()) throw std::invalid_argument("collate: empty batch");
  if (max_len < 1) throw std::invalid_argument("collate: max_len must be >= 1");
  if (pad_to_multiple < 1) throw std::invalid_argument("collate: pad_to_multiple must be >= 1");
  ClassBatch b;
  std::vector<const std::vector<int32_t>*> a, second;
  std::vector<int64_t> labels;
  for (const auto* e : examples) {
    a.push_back(&e->tokens);
    second.push_back(&e->tokens_b);
    labels.push_back(e->label);
  }
  pad(a, max_len, pad_to_multiple, b.tokens, b.mask);
  if (!examples.front()->tokens_b.empty())
    pad(second, max_len, pad_to_multiple, b.tokens_b, b.mask_b);
  b.labels = at::tensor(labels, at::kLong);
  return b;
}

ClassBatch to_device(const ClassBatch& batch, const c10::Device& device) {
  // collate builds batches in ordinary (pageable) memory: non_blocking would not overlap.
  auto move = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  return {move(batch.tokens), move(batch.mask), move(batch.tokens_b), move(batch.mask_b),
          move(batch.labels)};
}

at::Tensor class_logits(models::SequenceModel& model, const ClassBatch& host_batch) {
  const ClassBatch batch = to_device(host_batch, util::module_device(*model));
  if (model->config().cls_pair) {
    TORCH_CHECK(batch.tokens_b.defined(),
                "class_logits: a pair classifier needs examples with a second sequence");
    return model->classify_pair(batch.tokens, batch.mask, batch.tokens_b, batch.mask_b);
  }
  return model->classify(batch.tokens, batch.mask);
}

EpochOrder::EpochOrder(int64_t n, int64_t batch, uint64_t seed)
    : n_(n), batch_(batch), seed_(seed) {
  if (n < 1) throw std::invalid_argument("EpochOrder: the training split is empty");
  if (batch < 1) throw std::invalid_argument("EpochOrder: batch must be >= 1");
}

const std::vector<int64_t>& EpochOrder::permutation(int64_t epoch) {
  if (epoch != epoch_) {
    perm_.resize(static_cast<size_t>(n_));
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    uint64_t state = seed_ * 0x100000001b3ULL + static_cast<uint64_t>(epoch) + 1;
    for (int64_t i = n_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
      std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(j)]);
    }
    epoch_ = epoch;
  }
  return perm_;
}

std::vector<int64_t> EpochOrder::batch(int64_t step) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(batch_));
  for (int64_t k = step * batch_; k < (step + 1) * batch_; ++k)
    out.push_back(permutation(k / n_)[static_cast<size_t>(k % n_)]);
  return out;
}

AccuracyResult evaluate_classifier(models::SequenceModel& model,
                                   const std::vector<data::LabelledSequence>& split,
                                   int64_t batch_size, int64_t max_examples,
                                   int64_t pad_to_multiple, const EvalProgressFn& on_progress,
                                   dist::ProcessGroup* group) {
  if (batch_size < 1)
    throw std::invalid_argument("evaluate_classifier: batch size must be >= 1");
  if (split.empty()) throw std::invalid_argument("evaluate_classifier: the split is empty");
  const auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  int64_t n = static_cast<int64_t>(split.size());
  if (max_examples > 0) n = std::min(n, max_examples);
  // Longest first, so batches pad little (and the first batch shows the peak memory).
  std::vector<const data::LabelledSequence*> order;
  for (int64_t i = 0; i < n; ++i) order.push_back(&split[static_cast<size_t>(i)]);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->tokens.size() + a->tokens_b.size() > b->tokens.size() + b->tokens_b.size();
  });
  const int64_t max_len = model->config().max_len;
  LossTotals totals;
  for (int64_t i = 0, k = 0; i < n; i += batch_size, ++k) {
    if (group && k % group->world_size() != group->rank()) continue;
    const auto first = order.begin() + i;
    const std::vector<const data::LabelledSequence*> part(first,
                                                          first + std::min(batch_size, n - i));
    totals.add(classification_loss(model, collate(part, max_len, pad_to_multiple),
                                   LossReduction::kSum));
    if (on_progress) on_progress(std::min(n, i + batch_size), n);
  }
  if (group) all_reduce_totals(totals, *group);
  if (was_training) model->train();
  AccuracyResult r;
  r.examples = n;
  r.loss = totals.mean();
  r.accuracy = totals.accuracy();
  std::map<int32_t, int64_t> label_counts;
  int64_t most = 0;
  for (int64_t i = 0; i < n; ++i)
    most = std::max(most, ++label_counts[split[static_cast<size_t>(i)].label]);
  r.majority = static_cast<double>(most) / static_cast<double>(n);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace seqmix::train
