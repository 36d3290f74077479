// The Extractor's convolution (extractor eq. 18), beyond the shared checker that
// test_op_cases.cpp runs on its cases (the FFT path against the literal per-lag sum): the
// reference against eq. 18 by hand, the incremental form, and the contract's errors; the layer's initialisation at depth.
// Also what every op shares: Backend / Direction names and the op-case registry itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "seqmix/bench/ops_bench.h"
#include "seqmix/nn/extractor.h"
#include "seqmix/ops/extractor_conv.h"
#include "support/op_check.h"

using namespace seqmix;

namespace {

class ExtractorConv : public ::testing::TestWithParam<ops::OpCase> {};

// eq. 18 summed position by position in float64, the most literal form there is.
at::Tensor by_hand(const at::Tensor& x, const at::Tensor& w) {
  const int64_t t = x.size(1);
  at::Tensor out = at::zeros_like(x);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j <= i; ++j) out.select(1, i) += at::matmul(x.select(1, j), w[i - j]);
  return out;
}

// The FFT path against the literal per-lag sum: forward, dx, dW, float64 finite
// differences, float32 2x rule.
TEST_P(ExtractorConv, ReferenceIsEquation18AndUnreachedLagsGetNoGradient) {
  const ops::OpCase& c = GetParam();
  const ops::OpInputs in = c.make_inputs(at::kDouble, 21);
  const at::Tensor x = in.inputs[0].value, w = in.inputs[1].value.detach().requires_grad_(true);
  const at::Tensor ref = c.reference({x, w}, {});
  EXPECT_LE((ref - by_hand(x, w.detach())).abs().max().item<double>(), 1e-10);
  // Lags the sequence cannot reach get exactly zero gradient, on both paths.
  const int64_t t = x.size(1), l = w.size(0);
  if (t == l) return;
  for (auto backend : {ops::Backend::kernel, ops::Backend::reference}) {
    const at::Tensor out = c.implementation(backend)({x, w}, {});
    const at::Tensor g = torch::autograd::grad({(out * at::randn_like(out)).sum()}, {w})[0];
    EXPECT_EQ(g.narrow(0, t, l - t).abs().max().item<double>(), 0.0) << ops::to_string(backend);
  }
}

TEST_P(ExtractorConv, LastPositionMatchesForward) {
  const ops::OpCase& c = GetParam();
  const ops::OpInputs in = c.make_inputs(at::kDouble, 23);
  const at::Tensor x = in.inputs[0].value, w = in.inputs[1].value;
  const at::Tensor full = ops::extractor_conv_reference(x, w);
  for (int64_t i = 0; i < c.L; i += std::max<int64_t>(1, c.L / 7)) {
    const at::Tensor last = ops::extractor_conv_last(x.narrow(1, 0, i + 1), w);
    EXPECT_TRUE(at::allclose(last, full.select(1, i), 1e-10, 1e-10)) << "position " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, ExtractorConv,
                         ::testing::ValuesIn(ops::op_cases("extractor_conv")),
                         seqmix::testing::op_case_test_name);

TEST(ExtractorConvErrors, SequenceLongerThanWindowIsRejected) {
  at::Tensor x = at::randn({1, 9, 4}), w = at::randn({8, 4, 4});
  for (auto impl : {ops::Backend::kernel, ops::Backend::reference}) {
    try {
      ops::extractor_conv(x, w, impl);
      FAIL() << "no error";
    } catch (const c10::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("t = 9 exceeds the number of lag matrices l = 8"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ExtractorConvErrors, ShapeAndDtypeMismatchesAreRejected) {
  // c10::ValueError: a ValueError in Python, like every op's argument error.
  EXPECT_THROW(ops::extractor_conv(at::randn({1, 4, 5}), at::randn({8, 4, 4})), c10::ValueError);
  EXPECT_THROW(ops::extractor_conv(at::randn({4, 4}), at::randn({8, 4, 4})), c10::ValueError);
  EXPECT_THROW(ops::extractor_conv(at::randn({1, 4, 4}), at::randn({8, 4, 4}, at::kDouble)),
               c10::ValueError);
  EXPECT_THROW(ops::parse_backend("gemm"), std::invalid_argument);
}

TEST(OpBackend, ParsesKernelAndReferenceOnly) {
  EXPECT_EQ(ops::parse_backend("kernel"), ops::Backend::kernel);
  EXPECT_EQ(ops::parse_backend("reference"), ops::Backend::reference);
  // One spelling for each thing: the per-op names of the kernel are not accepted.
  EXPECT_THROW(ops::parse_backend("fused"), std::invalid_argument);
  EXPECT_THROW(ops::parse_backend("fft"), std::invalid_argument);
  for (auto b : {ops::Backend::kernel, ops::Backend::reference})
    EXPECT_EQ(ops::parse_backend(ops::to_string(b)), b);
  try {
    ops::parse_backend("Kernel");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'Kernel' (expected kernel or reference)"),
              std::string::npos)
        << e.what();
  }
  for (auto d : {ops::Direction::causal, ops::Direction::bidirectional})
    EXPECT_EQ(ops::parse_direction(ops::to_string(d)), d);
  EXPECT_THROW(ops::parse_direction("decoder"), std::invalid_argument);
}

// The registry itself: what the tests and the benchmark rely on.
TEST(OpRegistry, NamesAreUniqueAndEachOpHasOneBenchmarkedCase) {
  std::set<std::string> names;
  for (const auto& c : ops::op_cases()) {
    EXPECT_TRUE(names.insert(c.name()).second) << "duplicate " << c.name();
    for (char ch : c.name()) EXPECT_TRUE(std::isalnum(ch) || ch == '_') << c.name();
    EXPECT_TRUE(c.make_inputs && c.reference && c.kernel && c.at_shape) << c.name();
  }
  const std::vector<std::string> names_of_ops = ops::op_names();
  for (const char* op : {"aib_scan", "attention", "extractor_conv", "ces_scan"})
    EXPECT_NE(std::find(names_of_ops.begin(), names_of_ops.end(), op), names_of_ops.end()) << op;
  for (const auto& op : ops::op_names()) {
    int benchmarked = 0;
    for (const auto& c : ops::op_cases(op)) benchmarked += c.benchmarked;
    EXPECT_EQ(benchmarked, 1) << op;
  }
  try {
    ops::op_cases("conv");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'conv' (expected one of aib_scan, attention"),
              std::string::npos)
        << e.what();
  }
}

TEST(OpRegistry, InputsAreReproducibleAlikeInBothDtypesAndLeaveTheGlobalSeedAlone) {
  at::manual_seed(5);
  const at::Tensor before = at::randn({4});
  at::manual_seed(5);
  for (const auto& op : ops::op_names()) {
    const ops::OpCase c = ops::op_cases(op).back();
    const ops::OpInputs a = c.make_inputs(at::kDouble, 3), b = c.make_inputs(at::kDouble, 3);
    const ops::OpInputs f = c.make_inputs(at::kFloat, 3), other = c.make_inputs(at::kDouble, 4);
    for (size_t i = 0; i < a.inputs.size(); ++i) {
      EXPECT_TRUE(at::equal(a.inputs[i].value, b.inputs[i].value)) << c.name();
      EXPECT_TRUE(at::equal(f.inputs[i].value.to(at::kDouble), a.inputs[i].value)) << c.name();
      EXPECT_EQ(f.inputs[i].value.scalar_type(), at::kFloat);
      if (a.inputs[i].seq_dim >= 0) {
        EXPECT_FALSE(at::equal(a.inputs[i].value, other.inputs[i].value)) << c.name();
      }
    }
  }
  EXPECT_TRUE(at::equal(at::randn({4}), before)) << "the cases drew from the global generator";
}

TEST(OpRegistry, CasesMoveToBenchmarkShapes) {
  for (const auto& op : ops::op_names())
    for (const auto& c : ops::op_cases(op)) {
      if (!c.benchmarked) continue;
      const ops::OpCase s = c.at_shape(3, 40, 128);
      EXPECT_EQ(s.op, c.op);
      EXPECT_EQ(s.B, 3);
      EXPECT_EQ(s.L, 40);
      EXPECT_EQ(s.D, 128);
      const ops::OpInputs in = s.make_inputs(at::kFloat, 0);
      const at::Tensor out = s.kernel(in.values(), in.mask);
      EXPECT_EQ(out.size(0), 3) << s.name();
      EXPECT_EQ(out.size(s.out_seq_dim), 40) << s.name();
    }
  // Attention keeps its head width (64 for the benchmarked case).
  const ops::OpCase& att = [] {
    for (const auto& c : ops::op_cases("attention"))
      if (c.benchmarked) return c;
    throw std::logic_error("no benchmarked attention case");
  }();
  EXPECT_THROW(att.at_shape(1, 8, 100), std::invalid_argument);
}

TEST(OpsBench, UnknownOpsAreRefusedBeforeAnythingRuns) {
  bench::OpsBenchOptions o;
  o.ops = {"aib_scan_kernel", "flash"};
  int rows = 0;
  try {
    bench::run_ops_bench(o, [&](const nlohmann::json&) { ++rows; });
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'flash'"), std::string::npos) << m;
    for (const auto& n : bench::ops_bench_names()) EXPECT_NE(m.find(n), std::string::npos) << n;
  }
  EXPECT_EQ(rows, 0);
}

TEST(ExtractorLayer, StepRejectsPositionsPastTheWindow) {
  nn::Extractor m(nn::ExtractorOptions(4, 3));
  nn::MixerState s = m->init_state(2);
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) m->step(at::randn({2, 4}), s);
  EXPECT_THROW(m->step(at::randn({2, 4}), s), std::invalid_argument);
}

// The documented initialisation keeps a 6-layer residual stack without normalisation at a
// steady scale: ext at a full window has about the variance of its input, and the stack's
// output variance grows by far less than the 2^6 an unscaled residual stack can reach.
TEST(ExtractorLayer, InitialisationKeepsTheScaleAtDepth) {
  torch::manual_seed(24);
  const int64_t D = 64, l = 128, m = 6;
  nn::Extractor layer(nn::ExtractorOptions(D, l).n_layers(m));
  torch::NoGradGuard no_grad;
  at::Tensor x = at::randn({8, l, D});
  const double ext_var = ops::extractor_conv(x, layer->w_ext).select(1, l - 1).var().item<double>();
  EXPECT_GT(ext_var, 0.7);
  EXPECT_LT(ext_var, 1.4);
  at::Tensor h = x;
  for (int64_t i = 0; i < m; ++i) {
    nn::Extractor li(nn::ExtractorOptions(D, l).n_layers(m));
    h = h + li->forward(h, {});
  }
  const double grow = h.var().item<double>() / x.var().item<double>();
  EXPECT_GT(grow, 1.0);
  EXPECT_LT(grow, 3.0);
}

}  // namespace
