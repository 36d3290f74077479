// Precompiled header: the expensive LibTorch headers, shared by every translation unit.
#pragma once
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>
