#pragma once
/// @file evaluate.h
/// Held-out evaluation of a language model over a token stream (bytes or SentencePiece).
#include <cstdint>
#include <functional>
#include <string>

#include "seqmix/data/tokenizer.h"
#include "seqmix/models/sequence_model.h"

namespace seqmix::dist {
class ProcessGroup;  // seqmix/dist/process_group.h
}

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

/// Progress of an evaluation: (tokens scored so far, tokens to score in all). Called after
/// each batch of windows, the last call with done == total.
using EvalProgressFn = std::function<void(int64_t done, int64_t total)>;

/// Scores every token of `tokens` after the first with the training objective
/// (language_model_loss in objective.h, summed in double): non-overlapping windows of max_len
/// inputs (the window's first token is predicted from nothing before it in that window),
/// batched by `batch_size`, the last window shorter. `max_tokens` > 0 scores only the first
/// max_tokens tokens (periodic evaluations); 0 scores all. `tokenizer` (the one that produced
/// `tokens`) gives the byte count behind bpc. `on_progress` (optional) is told after every batch.
/// With `group` (a data-parallel run; every rank calls this with the same arguments), rank r
/// scores the batches r, r + W, r + 2W, ... and the sums are added over ranks, so every rank
/// gets the one-process result (up to the order of the double-precision sums).
/// @throws std::invalid_argument if batch_size < 1 or the model's vocabulary differs from the
///         tokenizer's.
EvalResult evaluate(models::SequenceModel& model, const data::TokenIds& tokens,
                    const data::Tokenizer& tokenizer, int64_t batch_size, int64_t max_tokens = 0,
                    const EvalProgressFn& on_progress = {},
                    dist::ProcessGroup* group = nullptr);

/// How many tokens `evaluate` scores for these arguments (what its progress counts to).
int64_t evaluated_tokens(const data::TokenIds& tokens, int64_t max_tokens);

}  // namespace seqmix::train
