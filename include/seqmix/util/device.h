#pragma once
/// @file device.h
/// The device a run computes on (train.device, --device, Python's device=): "cpu", "cuda"
/// (the current CUDA device, cuda:0 unless set) or "cuda:N". Parsing is independent of the
/// machine (a configuration naming cuda is valid anywhere); require_device checks the
/// machine, before anything is built or written.
#include <c10/core/Device.h>
#include <torch/cuda.h>

#include <cctype>
#include <stdexcept>
#include <string>

#include "seqmix/ops/common.h"

namespace seqmix::util {

/// What is wrong with `text` as a device name, as "must be ..., got ..." (empty: fine).
inline std::string device_error(const std::string& text) {
  if (text == "cpu" || text == "cuda") return "";
  const std::string prefix = "cuda:";
  if (text.size() > prefix.size() && text.size() <= prefix.size() + 4 &&
      text.compare(0, prefix.size(), prefix) == 0) {
    bool digits = true;
    for (size_t i = prefix.size(); i < text.size(); ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(text[i]));
    // "cuda:01" would be a second spelling of cuda:1.
    if (digits && (text[prefix.size()] != '0' || text.size() == prefix.size() + 1)) return "";
  }
  return "must be 'cpu', 'cuda' or 'cuda:N' (N a GPU index), got '" + text + "'";
}

/// `text` as a torch device. Independent of the machine.
/// @throws std::invalid_argument "<key>: must be 'cpu', 'cuda' or 'cuda:N' ..., got '<text>'".
inline c10::Device parse_device(const std::string& text, const std::string& key) {
  if (const std::string why = device_error(text); !why.empty())
    throw std::invalid_argument(key + ": " + why);
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text == "cuda") return c10::Device(c10::kCUDA, 0);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(text.substr(5))));
}

/// parse_device, then checked against this machine: CUDA needs a LibTorch with CUDA and a
/// visible GPU (torch::cuda::is_available()), libseqmix's CUDA kernels
/// (ops::cuda_kernels_built()), and cuda:N a GPU index below the device count.
/// @throws std::invalid_argument "<key> = 'cuda' but no CUDA device is available
///         (torch.cuda.is_available() is false)", or naming the index and the count.
inline c10::Device require_device(const std::string& text, const std::string& key) {
  const c10::Device device = parse_device(text, key);
  if (device.is_cpu()) return device;
  if (!torch::cuda::is_available())
    throw std::invalid_argument(key + " = '" + text +
                                "' but no CUDA device is available (torch.cuda.is_available() "
                                "is false); use 'cpu'");
  if (!ops::cuda_kernels_built())
    throw std::invalid_argument(key + " = '" + text +
                                "' but this seqmix was built without its CUDA kernels (CMake "
                                "SEQMIX_CUDA=off, or no nvcc or no CUDA PyTorch when it was "
                                "built: docs/CUDA.md)");
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (device.index() >= count)
    throw std::invalid_argument(key + " = '" + text + "' but this machine has " +
                                std::to_string(count) + " CUDA device" +
                                (count == 1 ? "" : "s") + " (cuda:0 to cuda:" +
                                std::to_string(count - 1) + ")");
  return device;
}

/// The device of `module`'s first parameter (CPU for a module without parameters).
template <class Module>
c10::Device module_device(const Module& module) {
  for (const auto& p : module.parameters()) return p.device();
  return c10::Device(c10::kCPU);
}

}  // namespace seqmix::util
