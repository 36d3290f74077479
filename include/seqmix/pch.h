// Precompiled header: the expensive LibTorch headers, shared by every translation unit.
#pragma once
#include <torch/torch.h>
#include <ATen/ATen.h>
#include <string>
#include <vector>
#include <memory>
#include <optional>
