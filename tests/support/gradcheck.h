#pragma once
// Test support: a float64 finite-difference gradient check (there is no C++ gradcheck).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

// Many tests include this header for temp_dir alone.
#include "support/temp_dir.h"

namespace seqmix::testing {

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

/// Checks d/dx of the scalar s(x) = sum(f(x) * R) (R a fixed random tensor) against central
/// differences, for every input that requires grad. At most `max_entries` entries per input
/// are probed (chosen at random, always including the first and last), plus one random
/// direction over the whole input. Inputs must be float64.
inline void expect_gradients_match_fd(const Fn& f, std::vector<at::Tensor> inputs,
                                      int64_t max_entries = 64, double eps = 1e-6,
                                      double atol = 1e-6, double rtol = 1e-5) {
  for (auto& x : inputs)
    if (x.defined()) {
      ASSERT_EQ(x.scalar_type(), at::kDouble) << "gradcheck needs float64";
    }
  at::Tensor out = f(inputs);
  ASSERT_TRUE(at::isfinite(out).all().item<bool>()) << "forward produced non-finite values";
  const at::Tensor R = at::randn_like(out);
  auto scalar = [&](const std::vector<at::Tensor>& in) { return (f(in) * R).sum().item<double>(); };
  std::vector<at::Tensor> grads;
  {
    std::vector<at::Tensor> leaves;
    for (auto& x : inputs)
      leaves.push_back(x.defined() && x.requires_grad() ? x.detach().clone().requires_grad_(true)
                                                        : x);
    (f(leaves) * R).sum().backward();
    for (size_t i = 0; i < leaves.size(); ++i)
      grads.push_back(inputs[i].defined() && inputs[i].requires_grad() ? leaves[i].grad()
                                                                       : at::Tensor());
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!grads[i].defined()) continue;
    ASSERT_TRUE(at::isfinite(grads[i]).all().item<bool>()) << "input " << i << ": non-finite grad";
    const int64_t n = inputs[i].numel();
    std::vector<int64_t> probe;
    if (n <= max_entries) {
      for (int64_t j = 0; j < n; ++j) probe.push_back(j);
    } else {
      probe = {0, n - 1};
      at::Tensor r = at::randint(n, {max_entries - 2}, at::kLong);
      for (int64_t j = 0; j < r.numel(); ++j) probe.push_back(r[j].item<int64_t>());
    }
    const at::Tensor g = grads[i].reshape({-1});
    for (int64_t j : probe) {
      std::vector<at::Tensor> plus = inputs, minus = inputs;
      plus[i] = inputs[i].detach().clone();
      minus[i] = inputs[i].detach().clone();
      plus[i].view({-1})[j] += eps;
      minus[i].view({-1})[j] -= eps;
      const double fd = (scalar(plus) - scalar(minus)) / (2 * eps);
      const double an = g[j].item<double>();
      EXPECT_NEAR(an, fd, atol + rtol * std::abs(fd)) << "input " << i << " entry " << j;
    }
    // One random direction through every entry at once.
    const at::Tensor d = at::randn_like(inputs[i]);
    std::vector<at::Tensor> plus = inputs, minus = inputs;
    plus[i] = inputs[i].detach() + eps * d;
    minus[i] = inputs[i].detach() - eps * d;
    const double fd = (scalar(plus) - scalar(minus)) / (2 * eps);
    const double an = (grads[i] * d).sum().item<double>();
    EXPECT_NEAR(an, fd, 10 * atol + rtol * std::abs(fd)) << "input " << i << " random direction";
  }
}

}  // namespace seqmix::testing
