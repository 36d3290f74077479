#pragma once
/// @file evaluate.h
/// Held-out evaluation of a byte-level language model.
#include <cstdint>
#include <string>

#include "seqmix/models/sequence_model.h"

namespace seqmix::train {

struct EvalResult {
  double loss = 0;     ///< mean next-byte negative log-likelihood, nats
  double bpc = 0;      ///< loss / ln 2, bits per character (byte)
  int64_t tokens = 0;  ///< bytes predicted
  double seconds = 0;
};

/// Scores every byte of `text` after the first: non-overlapping windows of max_len inputs
/// (the window's first byte is predicted from nothing before it in that window), batched by
/// `batch_size`, the last window shorter. `max_bytes` > 0 scores only the first max_bytes
/// bytes (periodic evaluations); 0 scores all.
EvalResult evaluate_bytes(models::SequenceModel& model, const std::string& text, int64_t batch_size,
                          int64_t max_bytes = 0);

}  // namespace seqmix::train
