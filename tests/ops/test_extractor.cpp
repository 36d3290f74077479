// The Extractor's convolution (extractor eq. 18): the FFT path against the literal per-lag
// sum (forward and gradients), both against float64 finite differences, the incremental
// form, and the contract's errors; the layer's initialisation at depth.
#include <gtest/gtest.h>

#include "seqmix/nn/extractor.h"
#include "seqmix/ops/extractor_conv.h"
#include "support/gradcheck.h"

using namespace seqmix;

namespace {

struct ConvCase {
  int64_t B, t, D, l;
};

class ExtractorConv : public ::testing::TestWithParam<ConvCase> {};

// eq. 18 summed position by position in float64, the most literal form there is.
at::Tensor by_hand(const at::Tensor& x, const at::Tensor& w) {
  const int64_t t = x.size(1);
  at::Tensor out = at::zeros_like(x);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j <= i; ++j) out.select(1, i) += at::matmul(x.select(1, j), w[i - j]);
  return out;
}

TEST_P(ExtractorConv, FftMatchesReferenceForwardAndBackward) {
  const ConvCase c = GetParam();
  for (auto dtype : {at::kDouble, at::kFloat}) {
    torch::manual_seed(21);
    at::Tensor x = at::randn({c.B, c.t, c.D}, dtype).requires_grad_(true);
    at::Tensor w = (at::randn({c.l, c.D, c.D}, dtype) / std::sqrt(double(c.D))).requires_grad_(true);
    at::Tensor r = at::randn({c.B, c.t, c.D}, dtype);
    at::Tensor ref = ops::extractor_conv_reference(x, w);
    auto [gx_ref, gw_ref] = [&] {
      auto g = torch::autograd::grad({(ref * r).sum()}, {x, w});
      return std::make_pair(g[0], g[1]);
    }();
    at::Tensor fast = ops::extractor_conv_fft(x, w);
    auto g = torch::autograd::grad({(fast * r).sum()}, {x, w});
    const double tol = dtype == at::kDouble ? 1e-10 : 2e-4;
    auto close = [&](const at::Tensor& a, const at::Tensor& b, const char* what) {
      const double scale = std::max(1.0, b.abs().max().item<double>());
      EXPECT_LE((a - b).abs().max().item<double>(), tol * scale)
          << what << " (" << c10::toString(dtype) << ")";
    };
    close(fast, ref, "forward");
    close(g[0], gx_ref, "dx");
    close(g[1], gw_ref, "dW");
    // Lags the sequence cannot reach get exactly zero gradient.
    if (c.t < c.l) {
      EXPECT_EQ(g[1].narrow(0, c.t, c.l - c.t).abs().max().item<double>(), 0.0);
    }
    if (dtype == at::kDouble) close(ref, by_hand(x.detach(), w.detach()), "reference vs eq. 18");
  }
}

TEST_P(ExtractorConv, GradientsMatchFiniteDifferences) {
  const ConvCase c = GetParam();
  if (c.B * c.t * c.D > 4096) GTEST_SKIP() << "covered by the smaller cases";
  torch::manual_seed(22);
  at::Tensor x = at::randn({c.B, c.t, c.D}, at::kDouble).requires_grad_(true);
  at::Tensor w = at::randn({c.l, c.D, c.D}, at::kDouble).requires_grad_(true);
  for (auto impl : {ops::Backend::kernel, ops::Backend::reference}) {
    SCOPED_TRACE(ops::to_string(impl));
    seqmix::testing::expect_gradients_match_fd(
        [&](const std::vector<at::Tensor>& in) { return ops::extractor_conv(in[0], in[1], impl); },
        {x, w}, 24);
  }
}

TEST_P(ExtractorConv, LastPositionMatchesForward) {
  const ConvCase c = GetParam();
  torch::manual_seed(23);
  at::Tensor x = at::randn({c.B, c.t, c.D}, at::kDouble);
  at::Tensor w = at::randn({c.l, c.D, c.D}, at::kDouble);
  const at::Tensor full = ops::extractor_conv_reference(x, w);
  for (int64_t i = 0; i < c.t; i += std::max<int64_t>(1, c.t / 7)) {
    const at::Tensor last = ops::extractor_conv_last(x.narrow(1, 0, i + 1), w);
    EXPECT_TRUE(at::allclose(last, full.select(1, i), 1e-10, 1e-10)) << "position " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ExtractorConv,
                         ::testing::Values(ConvCase{2, 1, 3, 4}, ConvCase{2, 7, 3, 8},
                                           ConvCase{1, 16, 4, 16}, ConvCase{3, 37, 5, 64},
                                           ConvCase{2, 128, 16, 128}),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           const ConvCase& c = i.param;
                           return "B" + std::to_string(c.B) + "_t" + std::to_string(c.t) + "_D" +
                                  std::to_string(c.D) + "_l" + std::to_string(c.l);
                         });

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
