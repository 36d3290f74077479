#include "seqmix/ops/common.h"

#include <stdexcept>

namespace seqmix::ops {

Backend parse_backend(const std::string& name) {
  if (name == "kernel") return Backend::kernel;
  if (name == "reference") return Backend::reference;
  throw std::invalid_argument("unknown op backend '" + name + "' (expected kernel or reference)");
}

std::string to_string(Backend backend) {
  return backend == Backend::kernel ? "kernel" : "reference";
}

Direction parse_direction(const std::string& name) {
  if (name == "causal") return Direction::causal;
  if (name == "bidirectional") return Direction::bidirectional;
  throw std::invalid_argument("unknown direction '" + name +
                              "' (expected causal or bidirectional)");
}

std::string to_string(Direction direction) {
  return direction == Direction::causal ? "causal" : "bidirectional";
}

bool cuda_kernels_built() {
#ifdef SEQMIX_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace seqmix::ops
