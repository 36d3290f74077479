// The Extractor's convolution (extractor eq. 18): every registered op case through the shared
// checker (the FFT path against the literal per-lag sum), the reference against eq. 18 by
// hand, the incremental form, and the contract's errors; the layer's initialisation at depth.
#include <gtest/gtest.h>

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
TEST_P(ExtractorConv, FftMatchesReference) { seqmix::testing::check_op_case(GetParam()); }

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
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("t = 9 exceeds the number of lag matrices l = 8"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ExtractorConvErrors, ShapeAndDtypeMismatchesAreRejected) {
  EXPECT_THROW(ops::extractor_conv(at::randn({1, 4, 5}), at::randn({8, 4, 4})),
               std::invalid_argument);
  EXPECT_THROW(ops::extractor_conv(at::randn({4, 4}), at::randn({8, 4, 4})), std::invalid_argument);
  EXPECT_THROW(ops::extractor_conv(at::randn({1, 4, 4}), at::randn({8, 4, 4}, at::kDouble)),
               std::invalid_argument);
  EXPECT_THROW(ops::parse_backend("gemm"), std::invalid_argument);
}

TEST(OpBackend, ParsesKernelReferenceAndTheOldSpellings) {
  EXPECT_EQ(ops::parse_backend("kernel"), ops::Backend::kernel);
  EXPECT_EQ(ops::parse_backend("reference"), ops::Backend::reference);
  // seqmix 0.1 wrote aib_impl = "fused" and extractor_impl = "fft".
  EXPECT_EQ(ops::parse_backend("fused"), ops::Backend::kernel);
  EXPECT_EQ(ops::parse_backend("fft"), ops::Backend::kernel);
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
