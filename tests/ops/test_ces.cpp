// Tests for the CES op (include/seqmix/ops/ces_scan.h): every registered CES op case through
// the shared checker (kernel vs the authors' FFT reference), a Vandermonde kernel summed
// directly in float64, the bidirectional semantics, the |mu| constraint and masks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <complex>
#include <string>
#include <vector>

#include "seqmix/ops/ces_scan.h"
#include "support/op_check.h"

namespace {

using seqmix::ops::CESCoefficients;
using seqmix::ops::Direction;

// Raw parameters drawn like the ring initialisation (|lambda| in [0.1, 0.9], phase in
// [0, pi], dt log-uniform in [1e-3, 0.1]) but with larger dt so short sequences still mix.
struct Params {
  at::Tensor log_lambda, log_alpha, log_beta;
};

Params make_params(int64_t C, at::ScalarType dtype) {
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor r = at::sqrt(at::rand({C}, opt) * (0.81 - 0.01) + 0.01);
  const at::Tensor theta = at::rand({C}, opt) * 3.14159;
  // log lambda = log r + i theta; lambda' = log(log lambda).
  const at::Tensor lr = at::log(r), li = theta;
  const at::Tensor lam_r = 0.5 * at::log(lr * lr + li * li), lam_i = at::atan2(li, lr);
  const at::Tensor dt =
      at::exp(at::rand({C}, opt) * (std::log(0.5) - std::log(0.05)) + std::log(0.05));
  Params p;
  p.log_lambda = at::stack({lam_r, lam_i}, 1).to(dtype);
  p.log_alpha = at::log(dt).unsqueeze(1).repeat({1, 2}).to(dtype);
  p.log_beta = (at::randn({C, 2}, opt) * 0.2).to(dtype);
  return p;
}

at::Tensor random_mask(int64_t B, int64_t L) {
  at::Tensor m = at::rand({B, L}) > 0.3;
  m.select(1, 0).fill_(true);
  return m;
}

// y_t = sum_n K[t - n] x_n with K from mu^n summed directly (std::complex, float64).
TEST(CES, KernelMatchesVandermondeSumInFloat64) {
  at::manual_seed(5);
  const int64_t B = 1, L = 64, H = 3;
  const Params p = make_params(2 * H, at::kDouble);
  const CESCoefficients coef =
      seqmix::ops::ces_coefficients(p.log_lambda, p.log_alpha, p.log_beta, 0.9999, false);
  const at::Tensor x = at::randn({B, L, H}, at::kDouble);
  const CESCoefficients fwd{coef.q.narrow(0, 0, H), coef.mu.narrow(0, 0, H),
                            coef.c.narrow(0, 0, H)};
  for (auto dir : {Direction::causal, Direction::bidirectional}) {
    const at::Tensor y =
        seqmix::ops::ces_scan_kernel(x, dir == Direction::causal ? fwd : coef, {}, dir);
    auto z = [&](const at::Tensor& t, int64_t row) {
      return std::complex<double>(t[row][0].item<double>(), t[row][1].item<double>());
    };
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < L; ++t) {
        double want = 0;
        const auto mu = z(coef.mu, h), c = z(coef.c, h);
        for (int64_t n = 0; n <= t; ++n)
          want += (c * std::pow(mu, static_cast<double>(t - n))).real() * x[0][n][h].item<double>();
        if (dir == Direction::bidirectional) {
          const auto mu2 = z(coef.mu, H + h), c2 = z(coef.c, H + h);
          for (int64_t n = t + 1; n < L; ++n)  // the backward kernel starts at lag 1
            want += (c2 * std::pow(mu2, static_cast<double>(n - t - 1))).real() *
                    x[0][n][h].item<double>();
        }
        EXPECT_NEAR(y[0][t][h].item<double>(), want, 1e-10) << "h " << h << " t " << t;
      }
  }
}

// A unit impulse at t0: the current token is weighted by the forward kernel only, position
// t0 - 1 sees the backward kernel's first coefficient, Re(c').
TEST(CES, BidirectionalBackwardKernelExcludesCurrentToken) {
  at::manual_seed(9);
  const int64_t L = 9, H = 2, t0 = 4;
  const Params p = make_params(2 * H, at::kDouble);
  const CESCoefficients coef =
      seqmix::ops::ces_coefficients(p.log_lambda, p.log_alpha, p.log_beta, 0.9999, false);
  at::Tensor x = at::zeros({1, L, H}, at::kDouble);
  x[0][t0].fill_(1.0);
  const at::Tensor y = seqmix::ops::ces_scan_kernel(x, coef, {}, Direction::bidirectional);
  const CESCoefficients fwd{coef.q.narrow(0, 0, H), coef.mu.narrow(0, 0, H),
                            coef.c.narrow(0, 0, H)};
  const at::Tensor yc = seqmix::ops::ces_scan_kernel(x, fwd, {}, Direction::causal);
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_NEAR(y[0][t0][h].item<double>(), coef.c[h][0].item<double>(), 1e-12);
    EXPECT_NEAR(y[0][t0 - 1][h].item<double>(), coef.c[H + h][0].item<double>(), 1e-12);
    for (int64_t t = t0; t < L; ++t)  // at and after the impulse only the forward form
      EXPECT_NEAR(y[0][t][h].item<double>(), yc[0][t][h].item<double>(), 1e-12);
  }
}

// |mu| > max_lambda is pulled back to max_lambda with no gradient to Re q (the authors'
// eq. 12 as coded); below the bound nothing changes.
TEST(CES, ConstraintAtItsBoundary) {
  const double max_lambda = 0.9;
  // q = exp(lambda') alpha with alpha = 1 + i: lambda' = log(q / (1 + i)).
  auto params_for_q = [](double qr, double qi) {
    const std::complex<double> lp =
        std::log(std::complex<double>(qr, qi) / std::complex<double>(1, 1));
    return at::tensor({lp.real(), lp.imag()}, at::kDouble).reshape({1, 2});
  };
  const at::Tensor la = at::zeros({1, 2}, at::kDouble), lb = at::zeros({1, 2}, at::kDouble);
  // Inside: |mu| = e^-0.2 < 0.9 stays; outside: e^-0.01 > 0.9 clamps to 0.9.
  for (double qr : {-0.2, -0.01}) {
    at::Tensor ll = params_for_q(qr, 0.7).requires_grad_(true);
    const CESCoefficients coef = seqmix::ops::ces_coefficients(ll, la, lb, max_lambda, false);
    const double mag = std::hypot(coef.mu[0][0].item<double>(), coef.mu[0][1].item<double>());
    const bool clamped = std::exp(qr) > max_lambda;
    EXPECT_NEAR(mag, clamped ? max_lambda : std::exp(qr), 1e-12);
    EXPECT_NEAR(coef.q[0][1].item<double>(), 0.7, 1e-12) << "Im q is never changed";
    // d Re q / d lambda' is zero when clamped, non-zero otherwise.
    coef.q.select(1, 0).sum().backward();
    const double g = ll.grad().abs().sum().item<double>();
    if (clamped)
      EXPECT_EQ(g, 0.0);
    else
      EXPECT_GT(g, 0.1);
  }
  EXPECT_THROW(seqmix::ops::ces_coefficients(params_for_q(-0.1, 0.1), la, lb, 1.5, false),
               c10::Error);
}

TEST(CES, MaskedInputsChangeNothingAndUnmaskedMaskIsANoOp) {
  at::manual_seed(11);
  const int64_t B = 2, L = 40, H = 6;
  for (auto dir : {Direction::causal, Direction::bidirectional}) {
    const Params p = make_params(dir == Direction::bidirectional ? 2 * H : H, at::kFloat);
    const CESCoefficients coef =
        seqmix::ops::ces_coefficients(p.log_lambda, p.log_alpha, p.log_beta, 0.9999, false);
    const at::Tensor x = at::randn({B, L, H});
    const at::Tensor mask = random_mask(B, L);
    at::Tensor x2 = x.clone();
    x2.masked_fill_(mask.logical_not().unsqueeze(-1), 1e6);
    const at::Tensor y1 = seqmix::ops::ces_scan_kernel(x, coef, mask, dir);
    const at::Tensor y2 = seqmix::ops::ces_scan_kernel(x2, coef, mask, dir);
    EXPECT_TRUE(at::equal(y1, y2));
    const at::Tensor all = at::ones({B, L}, at::kBool);
    EXPECT_TRUE(at::equal(seqmix::ops::ces_scan_kernel(x, coef, all, dir),
                          seqmix::ops::ces_scan_kernel(x, coef, {}, dir)));
  }
}

TEST(CES, BadShapesAreNamed) {
  const Params p = make_params(4, at::kFloat);
  const CESCoefficients coef =
      seqmix::ops::ces_coefficients(p.log_lambda, p.log_alpha, p.log_beta, 0.9999, false);
  const at::Tensor x = at::randn({1, 5, 4});
  EXPECT_NO_THROW(seqmix::ops::ces_scan_kernel(x, coef, {}, Direction::causal));
  try {
    seqmix::ops::ces_scan_kernel(x, coef, {}, Direction::bidirectional);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("must have 8 rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(seqmix::ops::ces_scan_kernel(x.to(at::kDouble), coef, {}, Direction::causal),
               c10::Error);
  EXPECT_THROW(
      seqmix::ops::ces_scan_kernel(x, coef, at::ones({1, 4}, at::kBool), Direction::causal),
      c10::Error);
  EXPECT_THROW(seqmix::ops::parse_backend("recurrence"), std::invalid_argument);
}

}  // namespace

// ---- Layers (include/seqmix/nn/ces.h) ----
#include "seqmix/nn/ces.h"

namespace {

TEST(CESLayer, RingInitialisation) {
  torch::manual_seed(1);
  seqmix::nn::CES ces(seqmix::nn::CESOptions(4000).r_min(0.3).r_max(0.8).max_phase(1.0));
  torch::NoGradGuard no_grad;
  // lambda' = log(log lambda): log lambda = exp(lambda') = -nu + i theta.
  const at::Tensor m = at::exp(ces->log_lambda.select(1, 0));
  const at::Tensor lr = m * at::cos(ces->log_lambda.select(1, 1));
  const at::Tensor theta = m * at::sin(ces->log_lambda.select(1, 1));
  const at::Tensor r = at::exp(lr);  // |lambda|
  EXPECT_GE(r.min().item<double>(), 0.3 - 1e-6);
  EXPECT_LE(r.max().item<double>(), 0.8 + 1e-6);
  // Uniform by area: E|lambda|^2 = (r_min^2 + r_max^2) / 2.
  EXPECT_NEAR((r * r).mean().item<double>(), (0.09 + 0.64) / 2, 0.01);
  EXPECT_GE(theta.min().item<double>(), 0.0);
  EXPECT_LE(theta.max().item<double>(), 1.0 + 1e-6);
  const at::Tensor dt = at::exp(ces->log_alpha);
  EXPECT_TRUE(at::equal(ces->log_alpha.select(1, 0), ces->log_alpha.select(1, 1)));
  EXPECT_GE(dt.min().item<double>(), 1e-3 - 1e-9);
  EXPECT_LE(dt.max().item<double>(), 0.1 + 1e-9);
  EXPECT_NEAR(ces->log_beta.std().item<double>(), 0.2, 0.01);
  EXPECT_NEAR(ces->omega.std().item<double>(), 1.0, 0.05);
  EXPECT_THROW(seqmix::nn::CES(seqmix::nn::CESOptions(4).r_min(0.9).r_max(0.5)),
               std::invalid_argument);
}

TEST(CESLayer, StepMatchesForwardForEveryShortcut) {
  for (auto sc : {seqmix::nn::CESShortcut::omega, seqmix::nn::CESShortcut::sigmoid,
                  seqmix::nn::CESShortcut::none})
    for (bool normalize : {false, true}) {
      torch::manual_seed(4);
      seqmix::nn::CES ces(
          seqmix::nn::CESOptions(6).shortcut(sc).normalize(normalize).dt_min(0.05).dt_max(0.5));
      ces->to(at::kDouble);
      torch::NoGradGuard no_grad;
      const at::Tensor x = at::randn({3, 30, 6}, at::kDouble);
      const at::Tensor full = ces->forward(x);
      at::Tensor s = ces->init_state(3);
      for (int64_t t = 0; t < 30; ++t) {
        const at::Tensor y = ces->step(x.select(1, t), s);
        ASSERT_TRUE(at::allclose(y, full.select(1, t), 1e-10, 1e-10))
            << seqmix::nn::to_string(sc) << " normalize " << normalize << " t=" << t;
      }
      // The shortcut of eq. 13 as chosen.
      const at::Tensor conv =
          full - (sc == seqmix::nn::CESShortcut::omega     ? x * ces->omega
                  : sc == seqmix::nn::CESShortcut::sigmoid ? x * at::sigmoid(ces->omega)
                                                           : at::zeros_like(x));
      EXPECT_TRUE(at::allclose(
          conv, seqmix::ops::ces_scan_reference(x, ces->coefficients(), {}, Direction::causal),
          1e-9, 1e-9));
    }
}

TEST(ESMLP, MasksGateAndDirections) {
  torch::manual_seed(6);
  for (bool causal : {true, false})
    for (bool gate : {false, true}) {
      seqmix::nn::ESMLP layer(seqmix::nn::ESMLPOptions(8, 12).causal(causal).gate(gate));
      EXPECT_EQ(static_cast<bool>(layer->gate_proj), gate);
      const at::Tensor x = at::randn({2, 15, 8});
      at::Tensor mask = at::ones({2, 15}, at::kBool);
      mask[0].narrow(0, 10, 5).fill_(false);  // right padding
      mask[1][3] = false;
      at::Tensor x2 = x.clone();
      x2.masked_fill_(mask.logical_not().unsqueeze(-1), 50.0);
      const at::Tensor y1 = layer->forward(x, mask), y2 = layer->forward(x2, mask);
      const at::Tensor valid = mask.unsqueeze(-1).expand_as(y1);
      EXPECT_TRUE(at::allclose(y1.masked_select(valid), y2.masked_select(valid), 1e-5, 1e-5))
          << "padded inputs leak (causal " << causal << ", gate " << gate << ")";
      EXPECT_TRUE(at::isfinite(y2).all().item<bool>());
      if (causal) {
        // Changing a later position never changes an earlier output.
        at::Tensor x3 = x.clone();
        x3[0][9] += 1.0;
        EXPECT_TRUE(at::allclose(layer->forward(x3, {}).narrow(1, 0, 9),
                                 layer->forward(x, {}).narrow(1, 0, 9)));
      } else {
        EXPECT_THROW(layer->init_state(2), std::logic_error);
        at::Tensor x3 = x.clone();
        x3[0][9] += 1.0;  // the bidirectional form sees later positions
        EXPECT_FALSE(at::allclose(layer->forward(x3, {}).narrow(1, 0, 9),
                                  layer->forward(x, {}).narrow(1, 0, 9)));
      }
    }
}

}  // namespace
