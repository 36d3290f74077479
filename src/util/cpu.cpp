#include "seqmix/util/cpu.h"

namespace seqmix::util {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  // A function-local static: initialised once, before any caller reads it, even when the
  // first calls come from several threads at once (the kernels dispatch inside OpenMP loops).
  static const CpuFeatures features = detect();
  return features;
}

bool cpu_runs_avx512_kernels() { return cpu_features().avx512; }

}  // namespace seqmix::util
