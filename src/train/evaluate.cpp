#include "seqmix/train/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "seqmix/data/byte_corpus.h"

namespace seqmix::train {

EvalResult evaluate_bytes(models::SequenceModel& model, const std::string& text, int64_t batch_size,
                          int64_t max_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const int64_t T = model->config().max_len;
  int64_t n = static_cast<int64_t>(text.size());
  if (max_bytes > 0) n = std::min(n, max_bytes + 1);
  const int64_t predicted = std::max<int64_t>(0, n - 1);
  const int64_t full = predicted / T, rest = predicted % T;
  double nll = 0;
  auto score = [&](int64_t first_window, int64_t count, int64_t len) {
    at::Tensor batch = at::empty({count, len + 1}, at::kLong);
    for (int64_t i = 0; i < count; ++i)
      batch[i].copy_(data::bytes_to_tensor(text, (first_window + i) * T, len + 1));
    at::Tensor logits = model->forward(batch.narrow(1, 0, len));
    nll += at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                  batch.narrow(1, 1, len).reshape({-1}), {}, at::Reduction::Sum)
               .item<double>();
  };
  for (int64_t w = 0; w < full; w += batch_size) score(w, std::min(batch_size, full - w), T);
  if (rest > 0) score(full, 1, rest);
  if (was_training) model->train();
  EvalResult r;
  r.tokens = predicted;
  r.loss = predicted > 0 ? nll / static_cast<double>(predicted) : 0.0;
  r.bpc = r.loss / std::log(2.0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace seqmix::train
