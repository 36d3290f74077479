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

/// @throws std::invalid_argument naming the option that is out of range.
void validate(const SamplingOptions& options);

/// Samples one token per row: logits [B, V] -> int64 [B].
at::Tensor sample_next(const at::Tensor& logits, const SamplingOptions& options,
                       at::Generator& generator);

/// Generates `max_new_tokens` tokens after `prompt` with incremental decoding: the prompt is
/// fed once through every mixer's `step`, then each new token costs one `step`. When the
/// position reaches max_len the state is rebuilt from the last max_len / 2 tokens (a sliding
/// window), since learned positions end there. `on_token` (optional) sees each new token.
/// @return the generated tokens (without the prompt).
/// @throws std::invalid_argument for an encoder or a classifier (n_classes > 0), an empty
///         prompt, a prompt token outside the vocabulary, or bad options.
data::TokenIds generate_tokens(models::SequenceModel& model, const data::TokenIds& prompt,
                               int64_t max_new_tokens, const SamplingOptions& options,
                               uint64_t seed, const std::function<void(int32_t)>& on_token = {});

/// Text in, text out: encodes `prompt` (a newline if empty) with `tokenizer`, generates
/// `max_new_tokens` tokens and decodes them. `on_text` (optional) receives the text as it
/// grows, each call the next piece (a UTF-8 character split over byte pieces is passed on
/// once complete).
/// @return the generated text (without the prompt).
/// @throws std::invalid_argument as generate_tokens, or if the model's vocabulary is not the
///         tokenizer's.
std::string generate_text(models::SequenceModel& model, const data::Tokenizer& tokenizer,
                          const std::string& prompt, int64_t max_new_tokens,
                          const SamplingOptions& options, uint64_t seed,
                          const std::function<void(const std::string&)>& on_text = {});

}  // namespace seqmix::generate
