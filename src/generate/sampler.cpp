#include "seqmix/generate/sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>

namespace seqmix::generate {

void validate(const SamplingOptions& o) {
  if (!(o.temperature >= 0))
    throw std::invalid_argument("--temperature must be >= 0, got " + std::to_string(o.temperature));
  if (o.top_k < 0)
    throw std::invalid_argument("--top-k must be >= 0, got " + std::to_string(o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw std::invalid_argument("--top-p must be in (0, 1], got " + std::to_string(o.top_p));
}

at::Tensor sample_next(const at::Tensor& logits_in, const SamplingOptions& o,
                       at::Generator& generator) {
  TORCH_CHECK(logits_in.dim() == 2, "sample_next: logits must be [B, V], got ", logits_in.sizes());
  at::Tensor logits = logits_in.to(at::kFloat);
  if (o.temperature == 0) return logits.argmax(-1);
  logits = logits / o.temperature;
  const int64_t V = logits.size(-1);
  if (o.top_k > 0 && o.top_k < V) {
    const at::Tensor kth = std::get<0>(logits.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(logits, -1);
  if (o.top_p < 1) {
    auto [sorted, idx] = probs.sort(-1, /*descending=*/true);
    // Drop a token when the tokens ranked above it already reach top_p (the first stays).
    const at::Tensor drop = (sorted.cumsum(-1) - sorted) >= o.top_p;
    sorted = sorted.masked_fill(drop, 0);
    probs = at::zeros_like(probs).scatter(-1, idx, sorted);
  }
  return at::multinomial(probs, 1, false, generator).squeeze(-1);
}

std::string generate_text(models::SequenceModel& model, const std::string& prompt,
                          int64_t max_new_tokens, const SamplingOptions& options, uint64_t seed,
                          const std::function<void(char)>& on_token) {
  validate(options);
  if (!model->config().causal)
    throw std::invalid_argument("generate: the model is an encoder (model.causal = false)");
  if (model->config().vocab_size < 256)
    throw std::invalid_argument("generate: byte-level generation needs vocab_size 256");
  torch::NoGradGuard no_grad;
  model->eval();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t max_len = model->config().max_len;
  std::string context = prompt.empty() ? std::string("\n") : prompt;
  std::string out;
  auto states = model->init_state(1);
  at::Tensor logits;
  auto feed = [&](const std::string& bytes) {
    for (unsigned char c : bytes)
      logits = model->step(at::full({1}, static_cast<int64_t>(c), at::kLong), states);
  };
  // Prime with the tail of the context that fits.
  if (static_cast<int64_t>(context.size()) > max_len)
    context = context.substr(context.size() - static_cast<size_t>(max_len));
  feed(context);
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const char c = static_cast<char>(sample_next(logits, options, gen).item<int64_t>());
    out += c;
    context += c;
    if (on_token) on_token(c);
    if (states[0].pos >= max_len) {
      context =
          context.substr(context.size() - static_cast<size_t>(std::max<int64_t>(1, max_len / 2)));
      states = model->init_state(1);
      feed(context);
    } else {
      feed(std::string(1, c));
    }
  }
  return out;
}

}  // namespace seqmix::generate
