#pragma once
/// @file schedule.h
/// Learning-rate schedule: linear warm-up from 0 to `lr` over `warmup_steps`, then cosine
/// (or linear) decay to `lr * min_lr_ratio` at `decay_steps` (0: `max_steps`), where it
/// stays, or constant.
#include <cstdint>

#include "seqmix/train/configuration/config.h"

namespace seqmix::train {

/// Learning rate for optimizer step `step` (0-based).
double learning_rate(const TrainConfig& config, int64_t step);

}  // namespace seqmix::train
