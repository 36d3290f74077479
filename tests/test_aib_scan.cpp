// Op-test registry for AIB attention (DESIGN.md, "Ops"): every case, named after a real
// configuration, checks the op's forward and gradients against independent oracles.
#include <gtest/gtest.h>

#include "seqmix/ops/aib_scan.h"
#include "support/gradcheck.h"

using seqmix::ops::AIBDirection;
using seqmix::ops::AIBWeights;

namespace {

struct AIBCase {
  std::string name;
  int64_t B, L, D;
  AIBDirection direction;
  AIBWeights weights;
  bool masked;
  int64_t fd_entries;  // finite-difference probes per input
};

std::vector<AIBCase> registry() {
  std::vector<AIBCase> cases;
  for (auto dir : {AIBDirection::causal, AIBDirection::bidirectional}) {
    for (auto w : {AIBWeights::prefix_exp, AIBWeights::exp, AIBWeights::ones}) {
      for (int64_t L : {1, 7, 64, 1000}) {
        for (bool masked : {false, true}) {
          const std::string name =
              std::string(dir == AIBDirection::causal ? "decoder" : "encoder") + "_" +
              seqmix::ops::to_string(w) + "_L" + std::to_string(L) + (masked ? "_masked" : "");
          cases.push_back({name, 2, L, 4, dir, w, masked, L >= 1000 ? 24 : 48});
        }
      }
    }
  }
  return cases;
}

struct Inputs {
  at::Tensor a, v, w, mask;
};

Inputs make_inputs(const AIBCase& c, at::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  Inputs in;
  const auto opt = at::TensorOptions().dtype(dtype);
  in.a = at::randn({c.B, c.L, c.D}, opt) * 2;
  in.v = at::randn({c.B, c.L, c.D}, opt);
  // Small level parameters keep the per-distance weights in a range where float64 finite
  // differences are accurate even at L = 1000.
  in.w = at::randn({seqmix::ops::aib_num_levels(c.L), c.D}, opt) * 0.3;
  if (c.masked) {
    // Row 0 keeps a valid prefix of ~2/3 of L; row 1 has a hole in the middle and, for L > 1,
    // starts with padding.
    in.mask = at::ones({c.B, c.L}, at::kBool);
    in.mask[0].narrow(0, (2 * c.L) / 3 + (c.L == 1), c.L - (2 * c.L) / 3 - (c.L == 1)).fill_(false);
    if (c.L > 1) {
      in.mask[1][0] = false;
      in.mask[1].narrow(0, c.L / 3, std::max<int64_t>(1, c.L / 4)).fill_(false);
    }
  }
  return in;
}

class AIBScanCase : public ::testing::TestWithParam<AIBCase> {};

TEST_P(AIBScanCase, ReferenceMatchesClosedForm) {
  const AIBCase& c = GetParam();
  Inputs in = make_inputs(c, at::kDouble, 1);
  at::Tensor ref =
      seqmix::ops::aib_scan_reference(in.a, in.v, in.w, in.mask, c.direction, c.weights);
  at::Tensor cf =
      seqmix::ops::aib_scan_closed_form(in.a, in.v, in.w, in.mask, c.direction, c.weights);
  ASSERT_EQ(ref.sizes(), in.a.sizes());
  EXPECT_TRUE(at::isfinite(ref).all().item<bool>());
  EXPECT_TRUE(at::allclose(ref, cf, 1e-10, 1e-10)) << (ref - cf).abs().max().item<double>();
  if (c.masked) {
    // Padded positions output exactly zero.
    at::Tensor pad = in.mask.logical_not().unsqueeze(-1).expand_as(ref);
    EXPECT_EQ(ref.masked_select(pad).abs().sum().item<double>(), 0.0);
  }
}

TEST_P(AIBScanCase, ReferenceGradientsMatchFiniteDifferences) {
  const AIBCase& c = GetParam();
  Inputs in = make_inputs(c, at::kDouble, 2);
  in.a.requires_grad_(true);
  in.v.requires_grad_(true);
  if (c.weights != AIBWeights::ones) in.w.requires_grad_(true);
  auto f = [&](const std::vector<at::Tensor>& x) {
    return seqmix::ops::aib_scan_reference(x[0], x[1], x[2], in.mask, c.direction, c.weights);
  };
  seqmix::testing::expect_gradients_match_fd(f, {in.a, in.v, in.w}, c.fd_entries);
}

TEST_P(AIBScanCase, Float32ReferenceIsCloseToFloat64) {
  const AIBCase& c = GetParam();
  Inputs d = make_inputs(c, at::kDouble, 3);
  at::Tensor out64 = seqmix::ops::aib_scan_reference(d.a, d.v, d.w, d.mask, c.direction, c.weights);
  at::Tensor out32 = seqmix::ops::aib_scan_reference(
      d.a.to(at::kFloat), d.v.to(at::kFloat), d.w.to(at::kFloat), d.mask, c.direction, c.weights);
  EXPECT_LT((out32.to(at::kDouble) - out64).abs().max().item<double>(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Registry, AIBScanCase, ::testing::ValuesIn(registry()),
                         [](const ::testing::TestParamInfo<AIBCase>& i) { return i.param.name; });

TEST(AIBScan, LagWeightsAreProductsOverBits) {
  at::Tensor W = at::tensor({2.0, 3.0, 5.0, 7.0}, at::kDouble).view({4, 1});
  at::Tensor a = seqmix::ops::aib_lag_weights(W, 16).view({-1});
  // weird-net eqs. 54-56 by example: a_7 = W1 W2 W4, a_10 = W2 W8, a_13 = W1 W4 W8.
  EXPECT_DOUBLE_EQ(a[0].item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(a[7].item<double>(), 2.0 * 3.0 * 5.0);
  EXPECT_DOUBLE_EQ(a[10].item<double>(), 3.0 * 7.0);
  EXPECT_DOUBLE_EQ(a[13].item<double>(), 2.0 * 5.0 * 7.0);
}

TEST(AIBScan, PrefixExpWeightsAreCumulative) {
  at::Tensor w = at::tensor({0.5, -1.0, 2.0}, at::kDouble).view({3, 1});
  at::Tensor W = seqmix::ops::aib_level_weights(w, AIBWeights::prefix_exp).view({-1});
  EXPECT_NEAR(W[0].item<double>(), std::exp(0.5), 1e-12);
  EXPECT_NEAR(W[1].item<double>(), std::exp(-0.5), 1e-12);
  EXPECT_NEAR(W[2].item<double>(), std::exp(1.5), 1e-12);
}

TEST(AIBScan, PSAttentionIsARunningSoftmaxAverage) {
  // With W = 1 (PS attention, weird-net eqs. 8-9), O_i = sum_j softmax(A[:i])_j V_j.
  torch::manual_seed(4);
  at::Tensor a = at::randn({1, 9, 3}, at::kDouble), v = at::randn({1, 9, 3}, at::kDouble);
  at::Tensor o =
      seqmix::ops::aib_scan_reference(a, v, {}, {}, AIBDirection::causal, AIBWeights::ones);
  for (int64_t i = 0; i < 9; ++i) {
    at::Tensor p = at::softmax(a.narrow(1, 0, i + 1), 1);
    at::Tensor expect = (p * v.narrow(1, 0, i + 1)).sum(1);
    EXPECT_TRUE(at::allclose(o.select(1, i), expect, 1e-12, 1e-12)) << "position " << i;
  }
}

TEST(AIBScan, LargeActivationsDoNotOverflow) {
  torch::manual_seed(5);
  at::Tensor a = at::randn({2, 64, 8}) * 30, v = at::randn({2, 64, 8});
  at::Tensor w = at::randn({6, 8});
  at::Tensor o =
      seqmix::ops::aib_scan_reference(a, v, w, {}, AIBDirection::causal, AIBWeights::prefix_exp);
  EXPECT_TRUE(at::isfinite(o).all().item<bool>());
}

TEST(AIBScan, FullyPaddedRowGivesZeroOutputAndZeroGradient) {
  at::Tensor a = at::randn({1, 5, 4}, at::kDouble).requires_grad_(true);
  at::Tensor v = at::randn({1, 5, 4}, at::kDouble).requires_grad_(true);
  at::Tensor w = at::randn({3, 4}, at::kDouble).requires_grad_(true);
  at::Tensor mask = at::zeros({1, 5}, at::kBool);
  for (auto dir : {AIBDirection::causal, AIBDirection::bidirectional}) {
    at::Tensor o = seqmix::ops::aib_scan_reference(a, v, w, mask, dir, AIBWeights::prefix_exp);
    EXPECT_EQ(o.abs().sum().item<double>(), 0.0);
    o.sum().backward();
    EXPECT_EQ(a.grad().abs().sum().item<double>(), 0.0);
    EXPECT_EQ(v.grad().abs().sum().item<double>(), 0.0);
    EXPECT_TRUE(at::isfinite(w.grad()).all().item<bool>());
    a.mutable_grad().zero_();
    v.mutable_grad().zero_();
    w.mutable_grad().zero_();
  }
}

TEST(AIBScan, RejectsBadShapesWithClearMessages) {
  at::Tensor a = at::randn({1, 8, 4});
  auto msg = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] {
              seqmix::ops::aib_scan(a, at::randn({1, 8, 5}), at::randn({3, 4}), {},
                                    AIBDirection::causal, AIBWeights::prefix_exp);
            }).find("V must match A"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              seqmix::ops::aib_scan(a, a, at::randn({2, 4}), {}, AIBDirection::causal,
                                    AIBWeights::prefix_exp);
            }).find("raise max_len"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              seqmix::ops::aib_scan(at::randn({1, 8, 3}), at::randn({1, 8, 3}), at::randn({3, 3}),
                                    {}, AIBDirection::bidirectional, AIBWeights::prefix_exp);
            }).find("odd"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              seqmix::ops::aib_scan(a, a, at::randn({3, 4}), at::ones({1, 7}, at::kBool),
                                    AIBDirection::causal, AIBWeights::prefix_exp);
            }).find("mask must be [B, L]"),
            std::string::npos);
}

}  // namespace
