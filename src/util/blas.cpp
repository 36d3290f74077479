#include "seqmix/util/blas.h"

#include <dlfcn.h>

#include <cstdlib>

namespace seqmix::util {

std::string openblas_core() {
  // Looked up at run time: the BLAS behind LibTorch is whatever libblas.so.3 points to.
  using CoreName = char* (*)();
  auto* get = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!get) return "";
  const char* name = get();
  return name ? name : "";
}

std::string blas_description() {
  const std::string core = openblas_core();
  if (core.empty()) return "not OpenBLAS";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  return "OpenBLAS " + core + (forced ? std::string(" (OPENBLAS_CORETYPE=") + forced + ")" : "");
}

}  // namespace seqmix::util
