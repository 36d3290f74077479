#include "seqmix/generate/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "seqmix/util/blas.h"
#include "seqmix/util/device.h"
#include "seqmix/util/signals.h"

namespace seqmix::generate {

int64_t generate_threads(int64_t requested) {
  return requested > 0 ? requested : kDefaultGenerateThreads;
}

std::string describe(const GenerationStats& s) {
  std::string threads = fmt::format("{} thread{}", s.threads, s.threads == 1 ? "" : "s");
  if (s.threads > 1 && !util::omp_wait_description().empty())
    threads += ", " + util::omp_wait_description();
  // "1 byte", "2 bytes" (the unit is a plural).
  auto count = [&](int64_t n) {
    return fmt::format("{} {}", n,
                       n == 1 && !s.unit.empty() && s.unit.back() == 's'
                           ? s.unit.substr(0, s.unit.size() - 1)
                           : s.unit);
  };
  std::string line = fmt::format("{} in {:.2f} s ({:.0f} {}/s, {})", count(s.new_tokens),
                                 s.seconds, s.tokens_per_second(), s.unit, threads);
  line.insert(line.find(' ') + 1, "new ");
  if (s.prompt_tokens > 0)
    line += fmt::format("; prompt of {} in {:.2f} s", count(s.prompt_tokens), s.prompt_seconds);
  return line;
}

void validate(const SamplingOptions& o) {
  // Infinite temperature would divide every logit to 0 (uniform sampling); NaN compares false.
  if (!(o.temperature >= 0 && std::isfinite(o.temperature)))
    throw std::invalid_argument("`temperature` must be a finite number >= 0, got " +
                                fmt::format("{}", o.temperature));
  if (o.top_k < 0)
    throw std::invalid_argument("`top_k` must be >= 0, got " + std::to_string(o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw std::invalid_argument("`top_p` must be in (0, 1], got " + fmt::format("{}", o.top_p));
}

namespace {
bool all_finite(const at::Tensor& t) { return at::isfinite(t).all().item<bool>(); }
}  // namespace

at::Tensor sample_next(const at::Tensor& logits_in, const SamplingOptions& o,
                       at::Generator& generator) {
  TORCH_CHECK(logits_in.dim() == 2, "sample_next: logits must be [B, V], got ", logits_in.sizes());
  at::Tensor logits = logits_in.to(at::kFloat);
  // LibTorch's multinomial would say "probability tensor contains either inf, nan or element
  // < 0", and argmax would pick a NaN.
  if (!all_finite(logits)) throw std::runtime_error("sample_next: the logits are not finite");
  if (o.temperature == 0) return logits.argmax(-1);
  const at::Tensor scaled = logits / o.temperature;
  // A temperature so small (1e-300) that the scaled logits overflow float: sampling at it is
  // greedy (the limit as the temperature goes to 0, and what softmax gives before overflow).
  if (!all_finite(scaled)) return logits.argmax(-1);
  logits = scaled;
  const int64_t V = logits.size(-1);
  if (o.top_k > 0 && o.top_k < V) {
    const at::Tensor kth = std::get<0>(logits.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(logits, -1);
  if (o.top_p < 1) {
    auto [sorted, idx] = probs.sort(-1, /*descending=*/true);
    // Drop a token when the tokens ranked above it already reach top_p (the first stays).
    // The most likely token always stays: with a top_p below float's smallest value (1e-300
    // is in (0, 1]) the comparison would otherwise drop every token.
    const at::Tensor drop = (sorted.cumsum(-1) - sorted) >= o.top_p;
    drop.narrow(-1, 0, 1).fill_(false);
    sorted = sorted.masked_fill(drop, 0);
    probs = at::zeros_like(probs).scatter(-1, idx, sorted);
  }
  return at::multinomial(probs, 1, false, generator).squeeze(-1);
}

namespace {
void check_language_model(models::SequenceModel& model) {
  if (!model->config().causal)
    throw std::invalid_argument("generate: the model is an encoder (model.causal = false)");
  // A classifier's LM head is never trained: its "text" would be noise.
  if (model->config().n_classes > 0)
    throw std::invalid_argument(
        "generate: the model is a classifier (model.n_classes = " +
        std::to_string(model->config().n_classes) +
        ", trained on a task); generation needs a language model");
}
}  // namespace

data::TokenIds generate_tokens(models::SequenceModel& model, const data::TokenIds& prompt,
                               int64_t max_new_tokens, const SamplingOptions& options,
                               uint64_t seed, const std::function<void(int32_t)>& on_token,
                               GenerationStats* stats) {
  validate(options);
  check_language_model(model);
  if (max_new_tokens < 0 || max_new_tokens > kMaxNewTokens)
    throw std::invalid_argument("generate: max_new_tokens must be in [0, 1e9], got " +
                                std::to_string(max_new_tokens));
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt holds no tokens");
  const int64_t V = model->config().vocab_size;
  for (const int32_t id : prompt)
    if (id < 0 || id >= V)
      throw std::invalid_argument("generate: prompt token " + std::to_string(id) +
                                  " is outside the model's vocabulary [0, " + std::to_string(V) +
                                  ")");
  torch::NoGradGuard no_grad;
  model->eval();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t max_len = model->config().max_len;
  data::TokenIds context = prompt, out;
  auto states = model->init_state(1);
  at::Tensor logits;
  const auto token_options = at::TensorOptions(at::kLong).device(util::module_device(*model));
  auto feed = [&](data::TokenIds::const_iterator begin, data::TokenIds::const_iterator end) {
    for (auto it = begin; it != end; ++it)
      logits = model->step(at::full({1}, static_cast<int64_t>(*it), token_options), states);
  };
  // Prime with the tail of the context that fits.
  if (static_cast<int64_t>(context.size()) > max_len)
    context.erase(context.begin(), context.end() - max_len);
  using Clock = std::chrono::steady_clock;
  const auto t_prompt = Clock::now();
  feed(context.begin(), context.end());
  const auto t_new = Clock::now();
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    util::check_interrupt();
    // Checked and sampled on the CPU with the CPU generator: the same seed draws the same
    // tokens on any device (the logits are read back once per token).
    const at::Tensor host_logits = logits.to(at::kCPU);
    if (!all_finite(host_logits))
      throw std::runtime_error("the model's output (logits) is not finite at new token " +
                               std::to_string(i + 1) +
                               "; the checkpoint's weights produce NaN or inf");
    const auto id =
        static_cast<int32_t>(sample_next(host_logits, options, gen).item<int64_t>());
    out.push_back(id);
    context.push_back(id);
    if (on_token) on_token(id);
    if (states[0].pos >= max_len) {
      // Learned positions end at max_len: restart from the last half window.
      context.erase(context.begin(), context.end() - std::max<int64_t>(1, max_len / 2));
      states = model->init_state(1);
      feed(context.begin(), context.end());
    } else {
      feed(context.end() - 1, context.end());
    }
  }
  if (stats) {
    stats->prompt_tokens = static_cast<int64_t>(std::min<size_t>(prompt.size(),
                                                                 static_cast<size_t>(max_len)));
    stats->prompt_seconds = std::chrono::duration<double>(t_new - t_prompt).count();
    stats->new_tokens = static_cast<int64_t>(out.size());
    stats->seconds = std::chrono::duration<double>(Clock::now() - t_new).count();
    stats->threads = at::get_num_threads();
  }
  return out;
}

std::string prompt_note(models::SequenceModel& model, int64_t prompt_tokens,
                        const std::string& unit) {
  const int64_t max_len = model->config().max_len;
  if (prompt_tokens <= max_len) return "";
  return fmt::format("the prompt is {} {}, longer than the model's max_len ({}): the model "
                     "sees its last {} only",
                     prompt_tokens, unit, max_len, max_len);
}

std::string generate_text(models::SequenceModel& model, const data::Tokenizer& tokenizer,
                          const std::string& prompt, int64_t max_new_tokens,
                          const SamplingOptions& options, uint64_t seed,
                          const std::function<void(const std::string&)>& on_text,
                          GenerationStats* stats) {
  check_language_model(model);  // before the vocabulary: a task's differs, and says less
  if (model->config().vocab_size != tokenizer.vocab_size())
    throw std::invalid_argument("generate: the model has vocab_size " +
                                std::to_string(model->config().vocab_size) +
                                " but the tokenizer has " + std::to_string(tokenizer.vocab_size()));
  data::TokenIds ids = tokenizer.encode(prompt.empty() ? std::string("\n") : prompt);
  data::TokenIds generated;
  std::string shown;
  // Tokens decode independently except byte pieces of one UTF-8 character, which decode to
  // U+FFFD until the character is complete: hold the text back while it ends in one.
  static const std::string kReplacement = "\xEF\xBF\xBD";
  auto show = [&](bool last) {
    const std::string text = tokenizer.decode(generated);
    const bool pending = text.size() >= 3 && text.compare(text.size() - 3, 3, kReplacement) == 0;
    if ((pending && !last) || text.size() <= shown.size() ||
        text.compare(0, shown.size(), shown) != 0)
      return;
    if (on_text) on_text(text.substr(shown.size()));
    shown = text;
  };
  int64_t n = 0;
  generate_tokens(model, ids, max_new_tokens, options, seed, [&](int32_t id) {
    generated.push_back(id);
    show(++n == max_new_tokens);
  }, stats);
  if (stats) stats->unit = tokenizer.is_bytes() ? "bytes" : "tokens";
  return tokenizer.decode(generated);
}

}  // namespace seqmix::generate
