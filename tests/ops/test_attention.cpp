// Tests for the softmax attention op (include/seqmix/ops/attention.h): the fused kernel vs
// the literal ATen reference (forward and every gradient) through one case registry, float64
// finite differences, rows that see no key, a long sequence, and argument errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "../src/ops/cpu/attention_kernel.h"
#include "seqmix/ops/attention.h"
#include "support/gradcheck.h"

namespace {

using seqmix::ops::Direction;
Direction dir(bool causal) { return causal ? Direction::causal : Direction::bidirectional; }

// Valid keys with some padding inside and at the end; `lead` pads the first positions too,
// so causal queries there see no key at all.
at::Tensor random_mask(int64_t B, int64_t L, bool lead) {
  at::Tensor m = at::rand({B, L}) > 0.3;
  if (L > 1) m.select(1, L - 1).fill_(false);
  m.select(1, L / 2).fill_(true);
  if (lead) m.narrow(1, 0, std::min<int64_t>(L, 2)).fill_(false);
  return m;
}

struct AttentionCase {
  std::string name;
  int64_t B, H, L, dh;
  bool causal, masked;
  at::ScalarType dtype;
};

std::vector<AttentionCase> attention_registry() {
  std::vector<AttentionCase> cases;
  for (bool causal : {true, false})
    for (bool masked : {false, true})
      for (auto dtype : {at::kFloat, at::kDouble})
        for (int64_t L : {1, 17, 130}) {
          // d_head 16 (the CPU presets') and 5 (not a whole vector).
          for (int64_t dh : {16, 5}) {
            const std::string name = std::string(causal ? "causal" : "bidir") + "_L" +
                                     std::to_string(L) + "_dh" + std::to_string(dh) +
                                     (masked ? "_masked" : "") +
                                     (dtype == at::kFloat ? "_f32" : "_f64");
            cases.push_back({name, 2, 3, L, dh, causal, masked, dtype});
          }
        }
  // The Pathfinder preset's shape (one sequence) and a paper-size head, several query blocks.
  cases.push_back({"bidir_L1024_dh16_masked_f32", 1, 2, 1024, 16, false, true, at::kFloat});
  cases.push_back({"causal_L700_dh64_masked_f32", 1, 2, 700, 64, true, true, at::kFloat});
  cases.push_back({"causal_L300_dh64_f64", 1, 1, 300, 64, true, false, at::kDouble});
  // Query blocks of 32 rows (the block shrinks as L grows).
  cases.push_back({"bidir_L4096_dh8_masked_f32", 1, 1, 4096, 8, false, true, at::kFloat});
  return cases;
}

class AttentionCaseTest : public ::testing::TestWithParam<AttentionCase> {};

struct Out {
  at::Tensor o, dq, dk, dv;
};

// Runs the baseline-ISA build of the kernel while alive (the CPU may have AVX-512).
struct BaseIsaGuard {
  explicit BaseIsaGuard(bool on) { seqmix::ops::cpu::attention_force_base_isa(on); }
  ~BaseIsaGuard() { seqmix::ops::cpu::attention_force_base_isa(false); }
};

Out run(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& mask,
        const at::Tensor& go, bool causal, bool kernel) {
  at::Tensor q = q0.detach().clone().requires_grad_(true);
  at::Tensor k = k0.detach().clone().requires_grad_(true);
  at::Tensor v = v0.detach().clone().requires_grad_(true);
  at::Tensor o = kernel ? seqmix::ops::attention_kernel(q, k, v, mask, dir(causal))
                        : seqmix::ops::attention_reference(q, k, v, mask, dir(causal));
  (o * go).sum().backward();
  return {o.detach(), q.grad(), k.grad(), v.grad()};
}

// Distance from the float64 truth relative to its scale; absolute where the truth is 0 (with
// L = 1 the output does not depend on q or k, and rounding is all there is).
double rel_err(const at::Tensor& t, const at::Tensor& truth) {
  const double scale = truth.abs().max().item<double>();
  return (t.to(at::kDouble) - truth).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

TEST_P(AttentionCaseTest, KernelMatchesReferenceForwardAndBackward) {
  const AttentionCase& c = GetParam();
  at::manual_seed(11);
  // Scores of a few units, as trained models have, so the softmax is not nearly uniform.
  const at::Tensor q = (2 * at::randn({c.B, c.H, c.L, c.dh})).to(c.dtype);
  const at::Tensor k = (2 * at::randn({c.B, c.H, c.L, c.dh})).to(c.dtype);
  const at::Tensor v = at::randn({c.B, c.H, c.L, c.dh}).to(c.dtype);
  const at::Tensor go = at::randn({c.B, c.H, c.L, c.dh}).to(c.dtype);
  const at::Tensor mask = c.masked ? random_mask(c.B, c.L, c.causal) : at::Tensor();
  const Out rf = run(q, k, v, mask, go, c.causal, false);
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const Out t = run(d(q), d(k), d(v), mask, d(go), c.causal, false);
  const double tol = c.dtype == at::kDouble ? 1e-10 : 1e-4;
  // Both builds of the kernel: the one this CPU runs and the baseline one.
  for (bool base : {false, true}) {
    BaseIsaGuard guard(base);
    const Out kr = run(q, k, v, mask, go, c.causal, true);
    const std::string isa = base ? " (baseline ISA)" : "";
    const std::vector<std::pair<std::string, std::pair<at::Tensor, at::Tensor>>> pairs = {
        {"o", {kr.o, t.o}}, {"dq", {kr.dq, t.dq}}, {"dk", {kr.dk, t.dk}}, {"dv", {kr.dv, t.dv}}};
    for (const auto& [name, kt] : pairs)
      EXPECT_LT(rel_err(kt.first, kt.second), tol) << name << isa;
    if (c.dtype == at::kFloat) {
      // Flash-attention's rule: at most 2x the float32 reference's distance from the truth.
      const std::vector<std::pair<at::Tensor, at::Tensor>> ref = {
          {rf.o, t.o}, {rf.dq, t.dq}, {rf.dk, t.dk}, {rf.dv, t.dv}};
      for (size_t i = 0; i < pairs.size(); ++i)
        EXPECT_LT(rel_err(pairs[i].second.first, pairs[i].second.second),
                  2 * rel_err(ref[i].first, ref[i].second) + 1e-6)
            << pairs[i].first << isa << " (flash-attention's 2x rule)";
    }
    for (const auto& g : {kr.o, kr.dq, kr.dk, kr.dv})
      EXPECT_TRUE(at::isfinite(g).all().item<bool>()) << isa;
    if (c.masked && !mask.all().item<bool>()) {
      // A padded key receives no gradient: it influenced nothing.
      const at::Tensor pad = mask.logical_not().view({c.B, 1, c.L, 1}).expand_as(kr.dk);
      EXPECT_EQ(kr.dk.masked_select(pad).abs().max().item<double>(), 0.0) << isa;
      EXPECT_EQ(kr.dv.masked_select(pad).abs().max().item<double>(), 0.0) << isa;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, AttentionCaseTest, ::testing::ValuesIn(attention_registry()),
                         [](const auto& info) { return info.param.name; });

TEST(Attention, KernelGradientsMatchFiniteDifferences) {
  at::manual_seed(3);
  for (bool causal : {true, false}) {
    const int64_t B = 2, H = 2, L = 19, dh = 6;
    const at::Tensor mask = random_mask(B, L, causal);
    auto f = [&](const std::vector<at::Tensor>& in) {
      return seqmix::ops::attention_kernel(in[0], in[1], in[2], mask, dir(causal));
    };
    auto x = [&] { return at::randn({B, H, L, dh}, at::kDouble).requires_grad_(true); };
    seqmix::testing::expect_gradients_match_fd(f, {x(), x(), x()});
  }
}

TEST(Attention, QueriesWithoutKeysGiveZeroAndNoGradient) {
  // Causal, first two positions padded: queries 0 and 1 see no valid key.
  const at::Tensor mask = (at::arange(5) >= 2).view({1, 5});
  const at::Tensor q = at::randn({1, 2, 5, 4}, at::kDouble).requires_grad_(true);
  const at::Tensor k = at::randn({1, 2, 5, 4}, at::kDouble).requires_grad_(true);
  const at::Tensor v = at::randn({1, 2, 5, 4}, at::kDouble).requires_grad_(true);
  for (auto impl : {seqmix::ops::Backend::kernel, seqmix::ops::Backend::reference}) {
    const at::Tensor o = seqmix::ops::attention(q, k, v, mask, Direction::causal, impl);
    EXPECT_EQ(o.narrow(2, 0, 2).abs().max().item<double>(), 0.0) << to_string(impl);
    EXPECT_GT(o.narrow(2, 2, 3).abs().max().item<double>(), 0.0) << to_string(impl);
    for (const auto& t : {q, k, v}) t.mutable_grad() = at::Tensor();
    o.sum().backward();
    EXPECT_EQ(q.grad().narrow(2, 0, 2).abs().max().item<double>(), 0.0) << to_string(impl);
    // The padded keys 0 and 1 influenced nothing.
    EXPECT_EQ(k.grad().narrow(2, 0, 2).abs().max().item<double>(), 0.0) << to_string(impl);
    EXPECT_EQ(v.grad().narrow(2, 0, 2).abs().max().item<double>(), 0.0) << to_string(impl);
    for (const auto& t : {q, k, v})
      EXPECT_TRUE(at::isfinite(t.grad()).all().item<bool>()) << to_string(impl);
  }
}

TEST(Attention, AllValidMaskEqualsNoMaskAndPaddingChangesNoValidRow) {
  at::manual_seed(5);
  const at::Tensor q = at::randn({2, 2, 40, 16}), k = at::randn({2, 2, 40, 16}),
                   v = at::randn({2, 2, 40, 16});
  for (bool causal : {true, false}) {
    const at::Tensor all = at::ones({2, 40}, at::kBool);
    EXPECT_TRUE(at::equal(seqmix::ops::attention_kernel(q, k, v, all, dir(causal)),
                          seqmix::ops::attention_kernel(q, k, v, {}, dir(causal))));
    // 24 padded positions in front, holding large values that would dominate any softmax,
    // leave the 40 outputs as they were (causal queries see those keys unless masked).
    const auto pad = [](const at::Tensor& t) { return at::constant_pad_nd(t, {0, 0, 24, 0}, 100.0); };
    const at::Tensor mask = at::cat({at::zeros({2, 24}, at::kBool), all}, 1);
    const at::Tensor padded = seqmix::ops::attention_kernel(pad(q), pad(k), pad(v), mask, dir(causal));
    EXPECT_TRUE(at::allclose(padded.narrow(2, 24, 40),
                             seqmix::ops::attention_kernel(q, k, v, {}, dir(causal)), 1e-5, 1e-6))
        << (causal ? "causal" : "bidir");
  }
}

// L = 16384 (Path-X): the kernel never forms the 16384^2 scores; the reference is checked on
// the last 48 queries only, against every key.
TEST(Attention, LongSequenceMatchesReferenceOnItsLastRows) {
  at::manual_seed(9);
  const int64_t L = 16384, R = 48;
  const at::Tensor q = at::randn({1, 1, L, 8}), k = at::randn({1, 1, L, 8}),
                   v = at::randn({1, 1, L, 8});
  const at::Tensor mask = random_mask(1, L, false);
  for (bool causal : {true, false}) {
    const at::Tensor o = seqmix::ops::attention_kernel(q, k, v, mask, dir(causal));
    // The last R queries against all keys; causal: query L - R + r sees keys <= L - R + r.
    const at::Tensor qd = q.narrow(2, L - R, R).to(at::kDouble), kd = k.to(at::kDouble),
                     vd = v.to(at::kDouble);
    at::Tensor s = at::matmul(qd, kd.transpose(-2, -1)) / std::sqrt(8.0);
    at::Tensor allowed = mask.view({1, 1, 1, L}).expand({1, 1, R, L});
    if (causal)
      allowed = allowed.logical_and(at::arange(L).view({1, L}) <=
                                    (at::arange(R) + (L - R)).view({R, 1}));
    const at::Tensor ref = at::matmul(at::softmax(s.masked_fill(allowed.logical_not(), -1e30), -1), vd);
    EXPECT_LT(rel_err(o.narrow(2, L - R, R), ref), 1e-5) << (causal ? "causal" : "bidir");
  }
}

TEST(Attention, BadArgumentsAreNamed) {
  const at::Tensor q = at::randn({1, 2, 5, 4});
  EXPECT_NO_THROW(seqmix::ops::attention_kernel(q, q, q, {}, Direction::causal));
  try {
    seqmix::ops::attention_kernel(q, at::randn({1, 2, 6, 4}), q, {}, Direction::causal);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("k is [1, 2, 6, 4] but q is [1, 2, 5, 4]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(seqmix::ops::attention_kernel(q, q, q.to(at::kDouble), {}, Direction::causal), c10::Error);
  EXPECT_THROW(seqmix::ops::attention_kernel(q, q, q, at::ones({1, 4}, at::kBool), Direction::causal),
               c10::Error);
  EXPECT_THROW(seqmix::ops::attention_kernel(q.view({2, 5, 4}), q, q, {}, Direction::causal), c10::Error);
  EXPECT_THROW(seqmix::ops::parse_backend("flash"), std::invalid_argument);
}

}  // namespace
