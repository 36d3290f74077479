#pragma once
/// @file evaluate.h
/// Held-out evaluation of a language model over a token stream (bytes or SentencePiece).
#include <cstdint>
#include <string>

#include "seqmix/data/tokenizer.h"
#include "seqmix/models/sequence_model.h"

namespace seqmix::train {

struct EvalResult {
  double loss = 0;        ///< mean next-token negative log-likelihood, nats per token
  double perplexity = 0;  ///< exp(loss), per token
  double bpc = 0;         ///< bits per character (byte) of the text scored: nll / bytes / ln 2;
                          ///< equal to loss / ln 2 for byte-level models, comparable across
                          ///< tokenizers
  int64_t tokens = 0;     ///< tokens predicted
  int64_t bytes = 0;      ///< bytes of text those tokens decode to
  double seconds = 0;
};

/// Scores every token of `tokens` after the first: non-overlapping windows of max_len inputs
/// (the window's first token is predicted from nothing before it in that window), batched by
/// `batch_size`, the last window shorter. `max_tokens` > 0 scores only the first max_tokens
/// tokens (periodic evaluations); 0 scores all. `tokenizer` (the one that produced `tokens`)
/// gives the byte count behind bpc.
/// @throws std::invalid_argument if batch_size < 1 or the model's vocabulary differs from the
///         tokenizer's.
EvalResult evaluate(models::SequenceModel& model, const data::TokenIds& tokens,
                    const data::Tokenizer& tokenizer, int64_t batch_size, int64_t max_tokens = 0);

}  // namespace seqmix::train
