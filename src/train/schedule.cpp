#include "seqmix/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace seqmix::train {

double learning_rate(const TrainConfig& c, int64_t step) {
  if (step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (c.schedule == "constant") return c.lr;
  const int64_t horizon = c.decay_steps > 0 ? c.decay_steps : c.max_steps;
  const double span = static_cast<double>(std::max<int64_t>(1, horizon - c.warmup_steps));
  const double p = std::clamp(static_cast<double>(step - c.warmup_steps) / span, 0.0, 1.0);
  const double lo = c.lr * c.min_lr_ratio;
  const double shape = c.schedule == "linear" ? 1.0 - p : 0.5 * (1.0 + std::cos(M_PI * p));
  return lo + (c.lr - lo) * shape;
}

}  // namespace seqmix::train
