#include "seqmix/util/threads.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace seqmix::util {

int64_t max_threads() {
  // As RunConfig::check_resources: more than four threads per hardware thread only thrash.
  return 4 * std::max<int64_t>(1, std::thread::hardware_concurrency());
}

void check_threads(int64_t threads, const std::string& what) {
  if (threads < 0 || threads > max_threads())
    throw std::invalid_argument(fmt::format(
        "{} must be 0 (all {} hardware threads) or a count up to {}, got {}", what,
        std::thread::hardware_concurrency(), max_threads(), threads));
}

int64_t configure_threads(int64_t threads) {
  check_threads(threads, "train.threads");
  const int64_t n =
      threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  // Also MKL's count: the wheel's MKL runs on the same OpenMP threads as ATen's loops.
  at::set_num_threads(static_cast<int>(n));
  return n;
}

}  // namespace seqmix::util
