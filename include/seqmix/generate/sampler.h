#pragma once
/// @file sampler.h
/// Next-token sampling (greedy, temperature, top-k, nucleus/top-p; Holtzman et al. 2020) and
/// incremental generation with a language model, in tokens or in text through a tokenizer.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>

#include "seqmix/data/tokenizer.h"
#include "seqmix/models/sequence_model.h"

namespace seqmix::generate {

struct SamplingOptions {
  double temperature = 1.0;  ///< 0 = greedy (argmax)
  int64_t top_k = 0;         ///< keep the k most likely tokens (0 = all)
  double top_p = 1.0;        ///< keep the smallest set whose probability reaches top_p
};

/// @throws std::invalid_argument naming the option that is out of range (a negative, infinite
///         or NaN temperature, a negative top_k, a top_p outside (0, 1]).
void validate(const SamplingOptions& options);

/// Samples one token per row: logits [B, V] -> int64 [B]. A temperature so small that the
/// scaled logits overflow samples greedily (its limit).
/// @throws std::runtime_error if the logits hold NaN or infinity.
at::Tensor sample_next(const at::Tensor& logits, const SamplingOptions& options,
                       at::Generator& generator);

/// Intra-op threads for generation when the caller does not choose (--threads 0): one.
/// Generating a token is a few dozen ops on one row ([1, D]); with 2 threads each token runs
/// ~10 OpenMP parallel regions (oneDNN's bmm and TensorIterator loops), and libgomp's
/// workers spin-wait between them. Measured with `seqmix generate` on the weird-net `mini`
/// byte model trained on SOTU, 2 cores already loaded by other builds (load average ~3.5),
/// hyperfine, mean (min..max) of 3 runs (2 for libgomp's default), whole process:
///                                      200 new bytes      2,000 new bytes
///   1 thread                           0.56 s             3.7 s (2.1..4.8)
///   1 thread, `yes` busy on a core     0.56 s             2.9 s (2.1..4.5)
///   2 threads, passive (re-executed)   2.0 s              5.3 s (4.0..6.1)
///   2 threads, passive, `yes` busy     2.0 s              5.4 s
///   2 threads, libgomp's default       11.9 s             32.7 s (31..34)
///   2 threads, default, `yes` busy     4.9 s              51 s (32..71)
/// One thread is never slower and uses the least CPU; 2 threads are stable only with the
/// passive wait policy (util::reexec_with_passive_omp_wait, for a caller that asks for more
/// than one thread).
constexpr int64_t kDefaultGenerateThreads = 1;

/// The most new tokens one generation call makes (1e9: days of decoding; a larger request is
/// a mistake, as 10**12 typed for 10**2). generate_tokens and generate_text refuse more, and
/// the CLI and Python check it before loading anything.
constexpr int64_t kMaxNewTokens = 1000000000;

/// `requested` if > 0, else kDefaultGenerateThreads.
int64_t generate_threads(int64_t requested);

/// What a generation did and how long it took (wall time, steady clock).
struct GenerationStats {
  int64_t prompt_tokens = 0;   ///< tokens fed before the first new one (the prompt's tail
                               ///< that fits max_len)
  double prompt_seconds = 0;   ///< feeding them
  int64_t new_tokens = 0;      ///< tokens generated
  double seconds = 0;          ///< generating them (sampling, steps, window restarts)
  std::string unit = "tokens";  ///< "bytes" for a byte-level tokenizer (generate_text)
  int64_t threads = 0;          ///< LibTorch intra-op threads it ran with
  /// new_tokens / seconds, 0 if nothing was timed.
  double tokens_per_second() const { return seconds > 0 ? new_tokens / seconds : 0.0; }
};

/// One line for stderr: "2000 new bytes in 3.52 s (568 bytes/s, 1 thread); prompt of 4 bytes
/// in 0.01 s"; with more threads also the OpenMP wait policy ("2 threads, OMP_WAIT_POLICY=
/// passive (set by seqmix)"; util::omp_wait_description).
std::string describe(const GenerationStats& stats);

/// Generates `max_new_tokens` tokens after `prompt` with incremental decoding: the prompt is
/// fed once through every mixer's `step`, then each new token costs one `step`. When the
/// position reaches max_len the state is rebuilt from the last max_len / 2 tokens (a sliding
/// window), since learned positions end there. `on_token` (optional) sees each new token;
/// `stats` (optional) receives the counts and times.
/// @return the generated tokens (without the prompt).
/// @throws std::invalid_argument for an encoder or a classifier (n_classes > 0), an empty
///         prompt, a prompt token outside the vocabulary, or bad options.
/// @throws std::runtime_error if the model's logits are not finite ("the model's output
///         (logits) is not finite at new token N; the checkpoint's weights produce NaN or inf").
data::TokenIds generate_tokens(models::SequenceModel& model, const data::TokenIds& prompt,
                               int64_t max_new_tokens, const SamplingOptions& options,
                               uint64_t seed, const std::function<void(int32_t)>& on_token = {},
                               GenerationStats* stats = nullptr);

/// What a user should know before a prompt of `prompt_tokens` tokens goes into `model`: ""
/// when it fits, else a note that the model sees only its last max_len tokens (positions
/// end at max_len). The CLI prints it; Python warns with it.
std::string prompt_note(models::SequenceModel& model, int64_t prompt_tokens,
                        const std::string& unit);

/// Text in, text out: encodes `prompt` (a newline if empty) with `tokenizer`, generates
/// `max_new_tokens` tokens and decodes them. `on_text` (optional) receives the text as it
/// grows, each call the next piece (a UTF-8 character split over byte pieces is passed on
/// once complete). `stats` (optional) as for generate_tokens, in bytes for a byte tokenizer.
/// @return the generated text (without the prompt).
/// @throws std::invalid_argument as generate_tokens, or if the model's vocabulary is not the
///         tokenizer's.
std::string generate_text(models::SequenceModel& model, const data::Tokenizer& tokenizer,
                          const std::string& prompt, int64_t max_new_tokens,
                          const SamplingOptions& options, uint64_t seed,
                          const std::function<void(const std::string&)>& on_text = {},
                          GenerationStats* stats = nullptr);

}  // namespace seqmix::generate
