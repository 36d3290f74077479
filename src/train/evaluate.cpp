#include "seqmix/train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "seqmix/dist/process_group.h"
#include "seqmix/train/objective.h"
#include "seqmix/util/signals.h"

namespace seqmix::train {

int64_t evaluated_tokens(const data::TokenIds& tokens, int64_t max_tokens) {
  int64_t n = static_cast<int64_t>(tokens.size());
  if (max_tokens > 0) n = std::min(n, max_tokens + 1);
  return std::max<int64_t>(0, n - 1);
}

EvalResult evaluate(models::SequenceModel& model, const data::TokenIds& tokens,
                    const data::Tokenizer& tokenizer, int64_t batch_size, int64_t max_tokens,
                    const EvalProgressFn& on_progress, dist::ProcessGroup* group) {
  if (batch_size < 1)
    throw std::invalid_argument("evaluate: batch size must be >= 1, got " +
                                std::to_string(batch_size));
  if (model->config().vocab_size != tokenizer.vocab_size())
    throw std::invalid_argument("evaluate: the model has vocab_size " +
                                std::to_string(model->config().vocab_size) + " but the tokenizer (" +
                                tokenizer.name() + ") has " +
                                std::to_string(tokenizer.vocab_size()));
  const auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const int64_t T = model->config().max_len;
  const int64_t predicted = evaluated_tokens(tokens, max_tokens);
  const int64_t n = predicted + (tokens.empty() ? 0 : 1);
  const int64_t full = predicted / T, rest = predicted % T;
  LossTotals totals;
  int64_t batch_index = 0;
  auto score = [&](int64_t first_window, int64_t count, int64_t len) {
    if (group && batch_index++ % group->world_size() != group->rank()) return;
    if (!group) util::check_interrupt();  // a rank alone must not stop: the others would wait
    at::Tensor batch = at::empty({count, len + 1}, at::kLong);
    for (int64_t i = 0; i < count; ++i)
      batch[i].copy_(data::tokens_to_tensor(tokens, (first_window + i) * T, len + 1));
    totals.add(language_model_loss(model, batch, LossReduction::kSum));
    if (on_progress) on_progress(totals.count, predicted);
  };
  for (int64_t w = 0; w < full; w += batch_size) score(w, std::min(batch_size, full - w), T);
  if (rest > 0) score(full, 1, rest);
  if (group) all_reduce_totals(totals, *group);
  if (was_training) model->train();
  EvalResult r;
  r.tokens = predicted;
  if (tokenizer.is_bytes() || predicted == 0)
    r.bytes = predicted;
  else
    r.bytes = static_cast<int64_t>(
        tokenizer.decode(data::TokenIds(tokens.begin() + 1, tokens.begin() + n)).size());
  const double nll = totals.nll;
  r.loss = totals.mean();
  r.perplexity = std::exp(r.loss);
  r.bpc = r.bytes > 0 ? nll / static_cast<double>(r.bytes) / std::log(2.0) : 0.0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace seqmix::train
