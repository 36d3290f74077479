// Tests for the softmax attention op (include/seqmix/ops/attention.h): every registered
// attention op case through the shared checker (fused kernel vs the literal ATen reference),
// rows that see no key, a long sequence, and argument errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "../src/mixers/attention/cpu/attention_kernel.h"
#include "seqmix/ops/attention.h"
#include "support/op_check.h"

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

class AttentionCase : public ::testing::TestWithParam<seqmix::ops::OpCase> {};

// The builds of the kernel (the one this CPU runs; on a CPU with AVX-512 BF16 the same with
// float32 score products for bfloat16 inputs; the baseline one) against the literal
// reference: forward, dq, dk, dv, float64 finite differences, float32 2x rule, bfloat16
// rows, padded keys.
TEST_P(AttentionCase, KernelMatchesReference) {
  seqmix::testing::check_op_case(
      GetParam(), {},
      {{"this CPU's ISA", nullptr},
       {"float32 products",
        [](bool on) { seqmix::ops::cpu::attention_force_float_products(on); }},
       {"baseline ISA", [](bool on) { seqmix::ops::cpu::attention_force_base_isa(on); }}});
}

INSTANTIATE_TEST_SUITE_P(Registry, AttentionCase,
                         ::testing::ValuesIn(seqmix::ops::op_cases("attention")),
                         seqmix::testing::op_case_test_name);

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
    const auto pad = [](const at::Tensor& t) {
      return at::constant_pad_nd(t, {0, 0, 24, 0}, 100.0);
    };
    const at::Tensor mask = at::cat({at::zeros({2, 24}, at::kBool), all}, 1);
    const at::Tensor padded =
        seqmix::ops::attention_kernel(pad(q), pad(k), pad(v), mask, dir(causal));
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
      allowed =
          allowed.logical_and(at::arange(L).view({1, L}) <= (at::arange(R) + (L - R)).view({R, 1}));
    const at::Tensor ref =
        at::matmul(at::softmax(s.masked_fill(allowed.logical_not(), -1e30), -1), vd);
    EXPECT_LT(seqmix::testing::rel_err(o.narrow(2, L - R, R), ref), 1e-5)
        << (causal ? "causal" : "bidir");
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
  EXPECT_THROW(seqmix::ops::attention_kernel(q, q, q.to(at::kDouble), {}, Direction::causal),
               c10::Error);
  EXPECT_THROW(
      seqmix::ops::attention_kernel(q, q, q, at::ones({1, 4}, at::kBool), Direction::causal),
      c10::Error);
  EXPECT_THROW(seqmix::ops::attention_kernel(q.view({2, 5, 4}), q, q, {}, Direction::causal),
               c10::Error);
  EXPECT_THROW(seqmix::ops::parse_backend("flash"), std::invalid_argument);
}

}  // namespace
