// AIB attention's scan (include/seqmix/ops/aib_scan.h). Every registered AIB op case
// (include/seqmix/ops/op_cases.h) goes through the shared checker on both paths of the fused
// kernel; the reference is also held against the closed form; then stability, the papers'
// identities and argument errors.
#include <gtest/gtest.h>

#include "../src/mixers/aib/cpu/aib_scan_kernel.h"
#include "seqmix/bench/ops_bench.h"
#include "seqmix/ops/aib_scan.h"
#include "support/gradcheck.h"
#include "support/op_check.h"

using seqmix::ops::AIBWeights;
using seqmix::ops::Direction;
using seqmix::ops::OpCase;

namespace {

class AIBScanCase : public ::testing::TestWithParam<OpCase> {};

// Both paths of the fused kernel: the plain-float fast path, which the registry's well-scaled
// inputs must never leave, and the shared-exponent path it falls back to (forced).
TEST_P(AIBScanCase, KernelMatchesReference) {
  int64_t fallbacks = 0;
  const seqmix::testing::KernelVariant fast{
      "fast path", [&](bool on) {
        if (on)
          fallbacks = seqmix::ops::cpu::aib_fast_path_fallbacks();
        else
          EXPECT_EQ(seqmix::ops::cpu::aib_fast_path_fallbacks(), fallbacks)
              << "fast path fell back";
      }};
  const seqmix::testing::KernelVariant exact{
      "exponent path", [](bool on) { seqmix::ops::cpu::aib_force_exact_path(on); }};
  seqmix::testing::check_op_case(GetParam(), {}, {fast, exact});
}

INSTANTIATE_TEST_SUITE_P(Registry, AIBScanCase,
                         ::testing::ValuesIn(seqmix::ops::op_cases("aib_scan")),
                         seqmix::testing::op_case_test_name);

// The cases the closed form below can afford (O(L^2 D)).
std::vector<OpCase> closed_form_cases() {
  std::vector<OpCase> out;
  for (const auto& c : seqmix::ops::op_cases("aib_scan"))
    if (c.L <= 1000) out.push_back(c);
  return out;
}

class AIBReferenceCase : public ::testing::TestWithParam<OpCase> {};

// A second, independent oracle for the reference: the closed form
// H_i = sum_d a_d E_{i-d} V_{i-d} evaluated directly.
TEST_P(AIBReferenceCase, MatchesClosedForm) {
  const OpCase& c = GetParam();
  const seqmix::ops::OpInputs in = c.make_inputs(at::kDouble, 1);
  const std::vector<at::Tensor> x = in.values();
  const at::Tensor ref = c.reference(x, in.mask);
  const at::Tensor cf = seqmix::ops::aib_scan_closed_form(
      x[0], x[1], x[2], in.mask, c.direction, seqmix::ops::parse_aib_weights(c.variant));
  ASSERT_EQ(ref.sizes(), x[0].sizes());
  EXPECT_TRUE(at::isfinite(ref).all().item<bool>());
  EXPECT_TRUE(at::allclose(ref, cf, 1e-10, 1e-10)) << (ref - cf).abs().max().item<double>();
  // The float32 reference stays close to the float64 one.
  const at::Tensor ref32 = c.reference(in.to(at::kFloat).values(), in.mask);
  EXPECT_LT(seqmix::testing::max_abs_err(ref32, ref), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Registry, AIBReferenceCase, ::testing::ValuesIn(closed_form_cases()),
                         seqmix::testing::op_case_test_name);

// ---- Stability: no overflow and no NaN wherever the exact result is finite.

// O_i = sum_j softmax_j(log a_{i-j} + A_j) V_j in float64 log space: finite for any A and W.
at::Tensor log_space_oracle(const at::Tensor& a, const at::Tensor& v, const at::Tensor& lw,
                            const at::Tensor& mask) {
  const int64_t L = a.size(1);
  std::vector<at::Tensor> log_lag(static_cast<size_t>(L));
  log_lag[0] = at::zeros_like(lw[0]);
  for (int64_t d = 1; d < L; ++d) {
    const int64_t low = d & -d;
    log_lag[static_cast<size_t>(d)] = log_lag[static_cast<size_t>(d - low)] +
                                      lw[__builtin_ctzll(static_cast<unsigned long long>(low))];
  }
  at::Tensor ll = at::stack(log_lag, 0);  // [L, D]
  at::Tensor idx = at::arange(L);
  at::Tensor dist = idx.unsqueeze(1) - idx.unsqueeze(0);
  at::Tensor logits = ll.index({dist.clamp_min(0)}).unsqueeze(0) + a.unsqueeze(1);  // [B, i, j, D]
  at::Tensor allowed = (dist >= 0).unsqueeze(0).unsqueeze(-1);
  if (mask.defined()) allowed = allowed.logical_and(mask.unsqueeze(1).unsqueeze(-1));
  logits = logits.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor p = at::softmax(logits, 2).nan_to_num(0.0);
  at::Tensor o = (p * v.unsqueeze(1)).sum(2);
  if (mask.defined()) o = o.masked_fill(mask.logical_not().unsqueeze(-1), 0);
  return o;
}

TEST(AIBFusedStability, LargeActivationsAndHugeDistanceWeights) {
  torch::manual_seed(31);
  const int64_t B = 2, L = 300, D = 20;
  at::Tensor a = at::randn({B, L, D}, at::kDouble) * 30;  // A ~ N(0, 30^2)
  at::Tensor v = at::randn({B, L, D}, at::kDouble);
  // Per-level weights up to 1e30 and down to 1e-30: exp(cumsum w) spans far beyond float32.
  at::Tensor w = at::zeros({9, D}, at::kDouble);
  w[0].fill_(std::log(1e30));
  w[1].fill_(-std::log(1e15));
  w[3].uniform_(-20, 20);
  at::Tensor mask = at::ones({B, L}, at::kBool);
  mask[1].narrow(0, 100, 50).fill_(false);
  const at::Tensor expect = log_space_oracle(a, v, at::cumsum(w, 0), mask);
  for (auto dtype : {at::kFloat, at::kDouble}) {
    at::Tensor af = a.to(dtype).requires_grad_(true), vf = v.to(dtype).requires_grad_(true);
    at::Tensor wf = w.to(dtype).requires_grad_(true);
    at::Tensor o =
        seqmix::ops::aib_scan_kernel(af, vf, wf, mask, Direction::causal, AIBWeights::prefix_exp);
    ASSERT_TRUE(at::isfinite(o).all().item<bool>()) << dtype;
    EXPECT_LT(seqmix::testing::max_abs_err(o, expect), dtype == at::kFloat ? 1e-4 : 1e-10) << dtype;
    o.sum().backward();
    EXPECT_TRUE(at::isfinite(af.grad()).all().item<bool>()) << dtype;
    EXPECT_TRUE(at::isfinite(vf.grad()).all().item<bool>()) << dtype;
    EXPECT_TRUE(at::isfinite(wf.grad()).all().item<bool>()) << dtype;
  }
  // The float64 gradients agree with finite differences even here.
  a.requires_grad_(true);
  v.requires_grad_(true);
  w.requires_grad_(true);
  auto f = [&](const std::vector<at::Tensor>& x) {
    return seqmix::ops::aib_scan_kernel(x[0], x[1], x[2], mask, Direction::causal,
                                       AIBWeights::prefix_exp);
  };
  seqmix::testing::expect_gradients_match_fd(f, {a, v, w}, 24, 1e-6, 1e-5, 1e-4);
}

// Distance weights far beyond float32's range on the levels longer than a tile (the rows of
// 128-position tiles). Up to e^+-40 per level (products to e^60 and beyond the float range
// over the levels), the row exponents keep them on the fast path, with padding too; at
// e^+-150 per level a row's sums can span more than float32 holds, and blocks may take the
// exponent path -- exact either way.
TEST(AIBFusedStability, DistanceWeightsBeyondFloatRangeStayOnTheFastPath) {
  struct Case {
    double top;
    bool padded, fast;
  };
  for (const Case& tc : {Case{40, false, true}, Case{40, true, true}, Case{150, false, false}}) {
    const double top = tc.top;
    const bool padded = tc.padded;
    torch::manual_seed(33);
    const int64_t B = 2, L = 700, D = 16;
    const int64_t K = seqmix::ops::aib_num_levels(L);
    at::Tensor w = at::zeros({K, D}, at::kDouble);
    w.narrow(0, 0, 7).copy_(at::randn({7, D}, at::kDouble) * 0.5);
    w[7].copy_(at::linspace(-top, top, D, at::kDouble));
    w[8].copy_(w[7] * -0.5);
    at::Tensor a = at::randn({B, L, D}, at::kDouble) * 2, v = at::randn({B, L, D}, at::kDouble);
    at::Tensor mask = at::ones({B, L}, at::kBool);
    if (padded) mask[1].narrow(0, 0, 200).fill_(false);  // whole rows of padding in front
    const at::Tensor expect = log_space_oracle(a, v, w, mask);
    const int64_t before = seqmix::ops::aib_scan_fallbacks();
    for (auto dtype : {at::kFloat, at::kDouble}) {
      const at::Tensor o = seqmix::ops::aib_scan_kernel(a.to(dtype), v.to(dtype), w.to(dtype),
                                                        mask, Direction::causal, AIBWeights::exp);
      EXPECT_LT(seqmix::testing::max_abs_err(o, expect), dtype == at::kFloat ? 1e-4 : 1e-10)
          << dtype << " " << top;
    }
    if (tc.fast) {
      EXPECT_EQ(seqmix::ops::aib_scan_fallbacks(), before) << top;
    }
    // Gradients: float32 against float64, both fused.
    std::vector<at::Tensor> g64, g32;
    for (auto dtype : {at::kDouble, at::kFloat}) {
      at::Tensor ad = a.to(dtype).clone().requires_grad_();
      at::Tensor vd = v.to(dtype).clone().requires_grad_();
      at::Tensor wd = w.to(dtype).clone().requires_grad_();
      const at::Tensor o =
          seqmix::ops::aib_scan_kernel(ad, vd, wd, mask, Direction::causal, AIBWeights::exp);
      (o * at::cos(at::arange(L, at::kDouble).view({1, L, 1})).to(dtype)).sum().backward();
      auto& out = dtype == at::kDouble ? g64 : g32;
      out = {ad.grad(), vd.grad(), wd.grad()};
    }
    if (tc.fast) {
      EXPECT_EQ(seqmix::ops::aib_scan_fallbacks(), before) << top;
    }
    for (size_t i = 0; i < 3; ++i) {
      const double scale = g64[i].abs().max().item<double>() + 1;
      EXPECT_LT(seqmix::testing::max_abs_err(g32[i].to(at::kDouble) / scale, g64[i] / scale),
                1e-4)
          << i << " " << top;
    }
  }
}

// A jump of 120 nats in A: later positions' E underflows against the running maximum, their
// blocks rerun on the exponent path, exactly, and the counter says so.
TEST(AIBFusedStability, FallbacksAreCountedAndExact) {
  at::Tensor a = at::zeros({1, 300, 16});
  a[0][100].fill_(120.0);
  const at::Tensor v = at::randn({1, 300, 16});
  const at::Tensor w = at::zeros({seqmix::ops::aib_num_levels(300), 16});
  const int64_t before = seqmix::ops::aib_scan_fallbacks();
  const at::Tensor o =
      seqmix::ops::aib_scan_kernel(a, v, w, {}, Direction::causal, AIBWeights::prefix_exp);
  EXPECT_GT(seqmix::ops::aib_scan_fallbacks(), before);
  const at::Tensor expect = log_space_oracle(a.to(at::kDouble), v.to(at::kDouble),
                                             at::zeros({9, 16}, at::kDouble), {});
  EXPECT_LT(seqmix::testing::max_abs_err(o, expect), 1e-5);
}

TEST(AIBFusedStability, FullyPaddedRowsGiveZeroOutputAndGradient) {
  for (auto dtype : {at::kFloat, at::kDouble}) {
    at::Tensor a = (at::randn({2, 40, 20}) * 50).to(dtype).requires_grad_(true);
    at::Tensor v = at::randn({2, 40, 20}).to(dtype).requires_grad_(true);
    at::Tensor w = at::randn({6, 20}).to(dtype).requires_grad_(true);
    at::Tensor mask = at::ones({2, 40}, at::kBool);
    mask[0].fill_(false);
    for (auto dir : {Direction::causal, Direction::bidirectional}) {
      at::Tensor o = seqmix::ops::aib_scan_kernel(a, v, w, mask, dir, AIBWeights::prefix_exp);
      EXPECT_EQ(o[0].abs().sum().item<double>(), 0.0);
      EXPECT_TRUE(at::isfinite(o).all().item<bool>());
      (o * at::randn_like(o)).sum().backward();
      EXPECT_EQ(a.grad()[0].abs().sum().item<double>(), 0.0);
      EXPECT_EQ(v.grad()[0].abs().sum().item<double>(), 0.0);
      EXPECT_TRUE(at::isfinite(a.grad()).all().item<bool>());
      EXPECT_TRUE(at::isfinite(w.grad()).all().item<bool>());
      a.mutable_grad().zero_();
      v.mutable_grad().zero_();
      w.mutable_grad().zero_();
    }
  }
}

TEST(AIBFused, NonContiguousInputsAndOddChannelCounts) {
  torch::manual_seed(32);
  at::Tensor big = at::randn({3, 50, 7}, at::kDouble);
  at::Tensor a = big.narrow(2, 0, 6).transpose(0, 0), v = big.narrow(2, 1, 6);  // strided
  at::Tensor w = at::randn({6, 6}, at::kDouble);
  for (auto dir : {Direction::causal, Direction::bidirectional})
    EXPECT_TRUE(at::allclose(seqmix::ops::aib_scan_kernel(a, v, w, {}, dir, AIBWeights::exp),
                             seqmix::ops::aib_scan_reference(a, v, w, {}, dir, AIBWeights::exp),
                             1e-10, 1e-10));
  at::Tensor a3 = at::randn({1, 9, 3}, at::kDouble), v3 = at::randn({1, 9, 3}, at::kDouble);
  EXPECT_TRUE(at::allclose(
      seqmix::ops::aib_scan_kernel(a3, v3, at::randn({4, 3}, at::kDouble), {}, Direction::causal,
                                  AIBWeights::ones),
      seqmix::ops::aib_scan_reference(a3, v3, {}, {}, Direction::causal, AIBWeights::ones), 1e-10,
      1e-10));
}

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
  at::Tensor o = seqmix::ops::aib_scan_reference(a, v, {}, {}, Direction::causal, AIBWeights::ones);
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
      seqmix::ops::aib_scan_reference(a, v, w, {}, Direction::causal, AIBWeights::prefix_exp);
  EXPECT_TRUE(at::isfinite(o).all().item<bool>());
}

// A later A far above the rest must not zero the earlier windows (one maximum per sequence
// underflows them) nor reach an earlier causal output: reference and closed form both.
TEST(AIBScan, ReferenceAndClosedFormAreExactAndCausalAtAnySpread) {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    const double spike = dtype == at::kFloat ? 120.0 : 800.0;
    at::Tensor a = at::zeros({1, 8, 1}, dtype);
    a[0][3][0] = spike;
    const at::Tensor v = at::arange(1, 9, at::TensorOptions(dtype)).view({1, 8, 1});
    const at::Tensor w = at::zeros({3, 1}, dtype);
    const at::Tensor expect = seqmix::ops::aib_scan_kernel(a, v, w, {}, Direction::causal,
                                                           AIBWeights::prefix_exp);
    const at::Tensor first = at::tensor({1.0, 1.5, 2.0}, at::TensorOptions(dtype));
    EXPECT_TRUE(at::allclose(expect.view({-1}).narrow(0, 0, 3), first));
    at::Tensor later = a.clone();
    later[0][6][0] = -spike;
    for (const auto* name : {"reference", "closed form"}) {
      auto run = [&](const at::Tensor& x) {
        return std::string(name) == "reference"
                   ? seqmix::ops::aib_scan_reference(x, v, w, {}, Direction::causal,
                                                     AIBWeights::prefix_exp)
                   : seqmix::ops::aib_scan_closed_form(x, v, w, {}, Direction::causal,
                                                       AIBWeights::prefix_exp);
      };
      const at::Tensor o = run(a);
      EXPECT_LT(seqmix::testing::max_abs_err(o, expect), 1e-5) << name << " " << dtype;
      EXPECT_TRUE(at::equal(run(later).narrow(1, 0, 6), o.narrow(1, 0, 6))) << name;
    }
  }
  // A wide spread in float32 against float64, both directions and a mask.
  torch::manual_seed(6);
  const at::Tensor a = at::randn({2, 40, 4}, at::kDouble) * 300, v = at::randn({2, 40, 4}, at::kDouble);
  const at::Tensor w = at::randn({6, 4}, at::kDouble) * 20;
  const at::Tensor mask = at::rand({2, 40}) > 0.2;
  for (auto dir : {Direction::causal, Direction::bidirectional}) {
    const at::Tensor cf = seqmix::ops::aib_scan_closed_form(a, v, w, mask, dir, AIBWeights::exp);
    const at::Tensor ref =
        seqmix::ops::aib_scan_reference(a.to(at::kFloat), v.to(at::kFloat), w.to(at::kFloat),
                                        mask, dir, AIBWeights::exp);
    EXPECT_LT(seqmix::testing::max_abs_err(ref.to(at::kDouble), cf), 1e-4);
    EXPECT_LT(seqmix::testing::max_abs_err(
                  seqmix::ops::aib_scan_kernel(a, v, w, mask, dir, AIBWeights::exp), cf),
              1e-10);
  }
}

TEST(AIBScan, FullyPaddedRowGivesZeroOutputAndZeroGradient) {
  at::Tensor a = at::randn({1, 5, 4}, at::kDouble).requires_grad_(true);
  at::Tensor v = at::randn({1, 5, 4}, at::kDouble).requires_grad_(true);
  at::Tensor w = at::randn({3, 4}, at::kDouble).requires_grad_(true);
  at::Tensor mask = at::zeros({1, 5}, at::kBool);
  for (auto dir : {Direction::causal, Direction::bidirectional}) {
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
                                    Direction::causal, AIBWeights::prefix_exp);
            }).find("V must match A"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              seqmix::ops::aib_scan(a, a, at::randn({2, 4}), {}, Direction::causal,
                                    AIBWeights::prefix_exp);
            }).find("raise max_len"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              seqmix::ops::aib_scan(at::randn({1, 8, 3}), at::randn({1, 8, 3}), at::randn({3, 3}),
                                    {}, Direction::bidirectional, AIBWeights::prefix_exp);
            }).find("odd"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              seqmix::ops::aib_scan(a, a, at::randn({3, 4}), at::ones({1, 7}, at::kBool),
                                    Direction::causal, AIBWeights::prefix_exp);
            }).find("mask must be [B, L]"),
            std::string::npos);
}

}  // namespace

// aib-net Fig. 3's two prefix-sum algorithms (bench rows prefix_sum_a / prefix_sum_b): both
// are the inclusive prefix sum, forward and backward, at lengths around powers of two.
TEST(AIBPrefixSumAlgorithms, SequentialAndLogDepthAreTheInclusivePrefixSum) {
  torch::manual_seed(3);
  for (const int64_t L : {1, 2, 5, 8, 9, 33}) {
    SCOPED_TRACE(L);
    const at::Tensor x = at::randn({2, L, 3}, at::kDouble);
    const at::Tensor g = at::randn({2, L, 3}, at::kDouble);
    const at::Tensor want = at::cumsum(x, 1);
    // d/dx of sum(g * cumsum(x)) is the suffix sum of g.
    const at::Tensor want_grad = at::flip(at::cumsum(at::flip(g, {1}), 1), {1});
    for (auto f : {&seqmix::bench::prefix_sum_sequential, &seqmix::bench::prefix_sum_logdepth}) {
      const at::Tensor xi = x.clone().requires_grad_(true);
      const at::Tensor y = f(xi);
      EXPECT_TRUE(at::allclose(y, want, 1e-12, 1e-12));
      (y * g).sum().backward();
      EXPECT_TRUE(at::allclose(xi.grad(), want_grad, 1e-12, 1e-12));
    }
  }
  EXPECT_THROW(seqmix::bench::prefix_sum_sequential(at::zeros({4, 4})), std::invalid_argument);
  EXPECT_THROW(seqmix::bench::prefix_sum_logdepth(at::zeros({4})), std::invalid_argument);
}
