// Op-test registry for AIB attention (DESIGN.md, "Ops"): every case, named after a real
// configuration, checks the op's forward and gradients against independent oracles.
#include <gtest/gtest.h>

#include "../src/ops/cpu/aib_scan_kernel.h"
#include "seqmix/ops/aib_scan.h"
#include "support/gradcheck.h"

using seqmix::ops::Direction;
using seqmix::ops::AIBWeights;

namespace {

struct AIBCase {
  std::string name;
  int64_t B, L, D;
  Direction direction;
  AIBWeights weights;
  bool masked;
  int64_t fd_entries;  // finite-difference probes per input
};

std::vector<AIBCase> registry() {
  std::vector<AIBCase> cases;
  for (auto dir : {Direction::causal, Direction::bidirectional}) {
    for (auto w : {AIBWeights::prefix_exp, AIBWeights::exp, AIBWeights::ones}) {
      for (int64_t L : {1, 7, 64, 1000}) {
        for (bool masked : {false, true}) {
          const std::string name =
              std::string(dir == Direction::causal ? "decoder" : "encoder") + "_" +
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

// ---- Fused kernel registry: every case checks forward and every gradient against the
// reference; float64 cases also against finite differences; float32 cases by the
// flash-attention rule (at most 2x the float32 reference's distance from float64).

struct FusedCase {
  std::string name;
  int64_t B, L, D;
  Direction direction;
  AIBWeights weights;
  bool masked;
  at::ScalarType dtype;
};

std::vector<FusedCase> fused_registry() {
  std::vector<FusedCase> cases;
  for (auto dir : {Direction::causal, Direction::bidirectional})
    for (auto w : {AIBWeights::prefix_exp, AIBWeights::exp, AIBWeights::ones})
      for (bool masked : {false, true})
        for (auto dtype : {at::kFloat, at::kDouble})
          for (int64_t L : {1, 2, 3, 17, 1000, 4096}) {
            // D = 20: one full 16-lane float block plus a partial one (and, bidirectional,
            // blocks that end at the D/2 boundary).
            const std::string name =
                std::string(dir == Direction::causal ? "decoder" : "encoder") + "_" +
                seqmix::ops::to_string(w) + "_L" + std::to_string(L) + (masked ? "_masked" : "") +
                (dtype == at::kFloat ? "_f32" : "_f64");
            cases.push_back({name, 2, L, 20, dir, w, masked, dtype});
          }
  cases.push_back({"decoder_prefix_exp_L16384_masked_f32", 2, 16384, 20, Direction::causal,
                   AIBWeights::prefix_exp, true, at::kFloat});
  // An odd number of channel blocks per sequence (or per half), so work items of two blocks
  // and of one block run side by side.
  cases.push_back({"decoder_prefix_exp_L300_D48_f32", 2, 300, 48, Direction::causal,
                   AIBWeights::prefix_exp, false, at::kFloat});
  cases.push_back({"encoder_exp_L300_D96_masked_f32", 2, 300, 96, Direction::bidirectional,
                   AIBWeights::exp, true, at::kFloat});
  cases.push_back({"encoder_exp_L300_D40_masked_f64", 2, 300, 40, Direction::bidirectional,
                   AIBWeights::exp, true, at::kDouble});
  return cases;
}

std::vector<FusedCase> fused_registry_f64() {
  std::vector<FusedCase> cases;
  for (const auto& c : fused_registry())
    if (c.dtype == at::kDouble) cases.push_back(c);
  return cases;
}

class AIBFusedCase : public ::testing::TestWithParam<FusedCase> {};
class AIBFusedCaseF64 : public ::testing::TestWithParam<FusedCase> {};

struct Grads {
  at::Tensor o, da, dv, dw;
};

Grads run(const FusedCase& c, const Inputs& in, bool fused, const at::Tensor& go) {
  at::Tensor a = in.a.detach().requires_grad_(true), v = in.v.detach().requires_grad_(true);
  at::Tensor w = in.w.detach().requires_grad_(c.weights != AIBWeights::ones);
  at::Tensor o = fused ? seqmix::ops::aib_scan_fused(a, v, w, in.mask, c.direction, c.weights)
                       : seqmix::ops::aib_scan_reference(a, v, w, in.mask, c.direction, c.weights);
  (o * go).sum().backward();
  // L = 1 uses no level, so the reference leaves w without a gradient.
  return {o.detach(), a.grad(), v.grad(), w.grad().defined() ? w.grad() : at::zeros_like(w)};
}

double max_err(const at::Tensor& x, const at::Tensor& ref) {
  return (x.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>();
}

void check_against_reference(const FusedCase& c) {
  AIBCase shape{c.name, c.B, c.L, c.D, c.direction, c.weights, c.masked, 0};
  const Inputs in64 = make_inputs(shape, at::kDouble, 7);
  const at::Tensor go64 = at::randn({c.B, c.L, c.D}, at::kDouble);
  const Grads ref64 = run(c, in64, false, go64);
  if (c.dtype == at::kDouble) {
    const Grads f = run(c, in64, true, go64);
    const double tol = 1e-10 * std::max(1.0, std::sqrt(static_cast<double>(c.L)));
    EXPECT_LT(max_err(f.o, ref64.o), tol);
    EXPECT_LT(max_err(f.da, ref64.da), tol * 10);
    EXPECT_LT(max_err(f.dv, ref64.dv), tol * 10);
    EXPECT_LT(max_err(f.dw, ref64.dw),
              tol * 100 * std::max(1.0, ref64.dw.abs().max().item<double>()));
    return;
  }
  Inputs in32{in64.a.to(at::kFloat), in64.v.to(at::kFloat), in64.w.to(at::kFloat), in64.mask};
  const at::Tensor go32 = go64.to(at::kFloat);
  const Grads f = run(c, in32, true, go32), r = run(c, in32, false, go32);
  // flash-attention's rule, with a floor for outputs the float32 reference gets exactly right.
  auto check = [&](const at::Tensor& fx, const at::Tensor& rx, const at::Tensor& x64,
                   const char* what) {
    const double scale = std::max(1.0, x64.abs().max().item<double>());
    EXPECT_LE(max_err(fx, x64), 2 * max_err(rx, x64) + 2e-6 * scale) << what;
  };
  check(f.o, r.o, ref64.o, "O");
  check(f.da, r.da, ref64.da, "dA");
  check(f.dv, r.dv, ref64.dv, "dV");
  check(f.dw, r.dw, ref64.dw, "dw");
}

// Both paths of the kernel: the plain-float fast path (taken for these well-scaled inputs)
// and the shared-exponent path it falls back to.
struct ExactPathGuard {
  explicit ExactPathGuard(bool on) { seqmix::ops::cpu::aib_force_exact_path(on); }
  ~ExactPathGuard() { seqmix::ops::cpu::aib_force_exact_path(false); }
};

TEST_P(AIBFusedCase, MatchesReferenceForwardAndBackward) {
  for (bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exponent path" : "fast path");
    ExactPathGuard guard(exact);
    const int64_t fallbacks = seqmix::ops::cpu::aib_fast_path_fallbacks();
    check_against_reference(GetParam());
    // These inputs are well scaled: the fast path must have produced the results itself.
    EXPECT_EQ(seqmix::ops::cpu::aib_fast_path_fallbacks(), fallbacks);
  }
}

TEST_P(AIBFusedCaseF64, GradientsMatchFiniteDifferences) {
  const FusedCase& c = GetParam();
  AIBCase shape{c.name, c.B, c.L, c.D, c.direction, c.weights, c.masked, 0};
  Inputs in = make_inputs(shape, at::kDouble, 8);
  in.a.requires_grad_(true);
  in.v.requires_grad_(true);
  if (c.weights != AIBWeights::ones) in.w.requires_grad_(true);
  auto f = [&](const std::vector<at::Tensor>& x) {
    return seqmix::ops::aib_scan_fused(x[0], x[1], x[2], in.mask, c.direction, c.weights);
  };
  for (bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exponent path" : "fast path");
    ExactPathGuard guard(exact);
    const int64_t fallbacks = seqmix::ops::cpu::aib_fast_path_fallbacks();
    seqmix::testing::expect_gradients_match_fd(f, {in.a, in.v, in.w}, c.L >= 1000 ? 16 : 32);
    EXPECT_EQ(seqmix::ops::cpu::aib_fast_path_fallbacks(), fallbacks);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, AIBFusedCase, ::testing::ValuesIn(fused_registry()),
                         [](const ::testing::TestParamInfo<FusedCase>& i) { return i.param.name; });
INSTANTIATE_TEST_SUITE_P(Registry, AIBFusedCaseF64, ::testing::ValuesIn(fused_registry_f64()),
                         [](const ::testing::TestParamInfo<FusedCase>& i) { return i.param.name; });

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
        seqmix::ops::aib_scan_fused(af, vf, wf, mask, Direction::causal, AIBWeights::prefix_exp);
    ASSERT_TRUE(at::isfinite(o).all().item<bool>()) << dtype;
    EXPECT_LT(max_err(o, expect), dtype == at::kFloat ? 1e-4 : 1e-10) << dtype;
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
    return seqmix::ops::aib_scan_fused(x[0], x[1], x[2], mask, Direction::causal,
                                       AIBWeights::prefix_exp);
  };
  seqmix::testing::expect_gradients_match_fd(f, {a, v, w}, 24, 1e-6, 1e-5, 1e-4);
}

TEST(AIBFusedStability, FullyPaddedRowsGiveZeroOutputAndGradient) {
  for (auto dtype : {at::kFloat, at::kDouble}) {
    at::Tensor a = (at::randn({2, 40, 20}) * 50).to(dtype).requires_grad_(true);
    at::Tensor v = at::randn({2, 40, 20}).to(dtype).requires_grad_(true);
    at::Tensor w = at::randn({6, 20}).to(dtype).requires_grad_(true);
    at::Tensor mask = at::ones({2, 40}, at::kBool);
    mask[0].fill_(false);
    for (auto dir : {Direction::causal, Direction::bidirectional}) {
      at::Tensor o = seqmix::ops::aib_scan_fused(a, v, w, mask, dir, AIBWeights::prefix_exp);
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
    EXPECT_TRUE(at::allclose(seqmix::ops::aib_scan_fused(a, v, w, {}, dir, AIBWeights::exp),
                             seqmix::ops::aib_scan_reference(a, v, w, {}, dir, AIBWeights::exp),
                             1e-10, 1e-10));
  at::Tensor a3 = at::randn({1, 9, 3}, at::kDouble), v3 = at::randn({1, 9, 3}, at::kDouble);
  EXPECT_TRUE(at::allclose(
      seqmix::ops::aib_scan_fused(a3, v3, at::randn({4, 3}, at::kDouble), {}, Direction::causal,
                                  AIBWeights::ones),
      seqmix::ops::aib_scan_reference(a3, v3, {}, {}, Direction::causal, AIBWeights::ones),
      1e-10, 1e-10));
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
  at::Tensor o =
      seqmix::ops::aib_scan_reference(a, v, {}, {}, Direction::causal, AIBWeights::ones);
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
