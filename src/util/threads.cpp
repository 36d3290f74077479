#include "seqmix/util/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
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

int64_t configure_threads(int64_t threads, int64_t blas_threads) {
  check_threads(threads, "train.threads");
  const int64_t n =
      threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(n));
  // LibTorch's threads and OpenBLAS's own pool oversubscribe the cores. Measured on 2 cores
  // (docs/RESULTS.md): weird-net/mini trains at 10.5k tokens/s with OpenBLAS on one thread
  // vs 8.6k with its default pool; at base size the two are within 5%. So GEMMs run
  // single-threaded inside LibTorch's parallelism. Looked up at run time: the BLAS behind
  // LibTorch is whatever Debian's libblas.so.3 alternative points to.
  using SetThreads = void (*)(int);
  if (auto* set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set(static_cast<int>(blas_threads > 0 ? blas_threads : n));
  return n;
}

}  // namespace seqmix::util
