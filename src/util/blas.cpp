#include "seqmix/util/blas.h"

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <ATen/cpu/Utils.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>

namespace seqmix::util {

namespace {
// Set beside OMP_WAIT_POLICY by the re-exec, so the logs can say who chose it.
constexpr const char* kWaitChosenEnv = "SEQMIX_OMP_WAIT_POLICY_CHOSEN";

// "v3.10.2" out of ATen's "Intel(R) MKL-DNN v3.10.2 (Git Hash ...)", or the whole line.
std::string version_in(const std::string& text) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex(R"(v?(\d+\.\d+(\.\d+)?))"))) return m[1].str();
  return text;
}
}  // namespace

std::string blas_description() {
  if (!at::hasMKL()) return "no MKL";
  // "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build ..."
  return "MKL " + version_in(at::get_mkl_version()) + " (fp32 GEMMs)";
}

std::string onednn_description() {
  if (!at::hasMKLDNN()) return "oneDNN not built in";
  const std::string v = "oneDNN v" + version_in(at::get_mkldnn_version());
  const auto caps = at::cpu::get_cpu_capabilities();  // cpuinfo's, as oneDNN sees the CPU
  auto has = [&](const char* key) {
    auto it = caps.find(key);
    return it != caps.end() && it->second.isBool() && it->second.toBool();
  };
  if (has("amx_bf16")) return v + ", bf16 on AMX";
  if (has("avx512_bf16")) return v + ", bf16 on AVX-512 BF16";
  return v + ", bf16 emulated in fp32 (no AVX-512 BF16)";
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
