#include "seqmix/util/blas.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl_types.h>
#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace seqmix::util {

namespace {
// Set beside OPENBLAS_CORETYPE by the re-exec, so the logs can say who chose the kernels.
constexpr const char* kChosenEnv = "SEQMIX_OPENBLAS_CORETYPE_CHOSEN";
// The same for OMP_WAIT_POLICY.
constexpr const char* kWaitChosenEnv = "SEQMIX_OMP_WAIT_POLICY_CHOSEN";
}  // namespace

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
  if (!forced) return "OpenBLAS " + core;
  const char* chosen = std::getenv(kChosenEnv);
  if (chosen && std::strcmp(chosen, forced) == 0) {
    return "OpenBLAS " + core +
           " (chosen by seqmix: OpenBLAS did not recognise this CPU and fell back to Prescott; "
           "set OPENBLAS_CORETYPE to choose)";
  }
  return "OpenBLAS " + core + " (OPENBLAS_CORETYPE=" + forced + ")";
}

std::string onednn_description() {
  // Looked up at run time, like OpenBLAS: the oneDNN that counts is the one LibTorch loaded.
  using Version = const dnnl_version_t* (*)();
  using Isa = dnnl_cpu_isa_t (*)();
  auto* version = reinterpret_cast<Version>(dlsym(RTLD_DEFAULT, "dnnl_version"));
  auto* isa = reinterpret_cast<Isa>(dlsym(RTLD_DEFAULT, "dnnl_get_effective_cpu_isa"));
  if (!version || !isa) return "oneDNN not loaded";
  const dnnl_version_t* v = version();
  const char* name = "unknown";
  bool amx = false;
  switch (isa()) {
    case dnnl_cpu_isa_all: name = "all"; break;
    case dnnl_cpu_isa_sse41: name = "sse41"; break;
    case dnnl_cpu_isa_avx: name = "avx"; break;
    case dnnl_cpu_isa_avx2: name = "avx2"; break;
    case dnnl_cpu_isa_avx2_vnni: name = "avx2_vnni"; break;
    case dnnl_cpu_isa_avx512_mic: name = "avx512_mic"; break;
    case dnnl_cpu_isa_avx512_mic_4ops: name = "avx512_mic_4ops"; break;
    case dnnl_cpu_isa_avx512_core: name = "avx512_core"; break;
    case dnnl_cpu_isa_avx512_core_vnni: name = "avx512_core_vnni"; break;
    case dnnl_cpu_isa_avx512_core_bf16: name = "avx512_core_bf16"; break;
    case dnnl_cpu_isa_avx512_core_amx: name = "avx512_core_amx"; amx = true; break;
    default: break;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "oneDNN %d.%d.%d, ISA %s (AMX: %s)", v->major, v->minor,
                v->patch, name, amx ? "yes" : "no");
  return buf;
}

std::string openblas_core_override(const std::string& loaded_core, bool coretype_set,
                                   const CpuFeatures& cpu) {
  // Only the generic fallback is second-guessed: any family OpenBLAS detected, or that the
  // user asked for, is its (or their) informed choice.
  if (coretype_set || strcasecmp(loaded_core.c_str(), "Prescott") != 0) return "";
  if (cpu.avx512_bf16) return "Cooperlake";
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

void reexec_with_fitting_openblas_core(char** argv) {
  const std::string core = openblas_core_override(
      openblas_core(), std::getenv("OPENBLAS_CORETYPE") != nullptr, cpu_features());
  if (core.empty()) return;
  // Both variables are set now, so the new image finds OPENBLAS_CORETYPE and never loops.
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  setenv(kChosenEnv, core.c_str(), 1);
  execv("/proc/self/exe", argv);
  // The exec (or a setenv) failed: no /proc, say. Carry on with the kernels already loaded,
  // and let the logs say so rather than claim the chosen family.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kChosenEnv);
}

std::string omp_wait_policy_override(const char* current, int64_t threads) {
  if (current != nullptr || threads <= 1) return "";
  return "passive";
}

void reexec_with_passive_omp_wait(char** argv, int64_t threads) {
  const std::string policy = omp_wait_policy_override(std::getenv("OMP_WAIT_POLICY"), threads);
  if (policy.empty()) return;
  setenv("OMP_WAIT_POLICY", policy.c_str(), 1);
  setenv(kWaitChosenEnv, policy.c_str(), 1);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // The exec failed: libgomp keeps the policy it loaded with; say nothing that claims otherwise.
  unsetenv("OMP_WAIT_POLICY");
  unsetenv(kWaitChosenEnv);
}

std::string omp_wait_description() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (!policy) return "";
  const char* chosen = std::getenv(kWaitChosenEnv);
  return std::string("OMP_WAIT_POLICY=") + policy +
         (chosen && std::strcmp(chosen, policy) == 0 ? " (set by seqmix)" : "");
}

}  // namespace seqmix::util
