// CES: coefficients, the authors' FFT reference, and the recurrence kernel as an autograd
// Function (src/ops/cpu/ces_scan_kernel.cpp).
#include "seqmix/ops/ces_scan.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <cmath>
#include <stdexcept>

#include "check_mask.h"
#include "low_precision.h"
#include "cpu/ces_scan_kernel.h"

namespace seqmix::ops {

namespace {

void check_param(const char* fn, const char* name, const at::Tensor& t, int64_t C) {
  TORCH_CHECK(t.defined() && t.dim() == 2 && t.size(1) == 2, fn, ": ", name,
              " must be [C, 2] (real, imaginary), got ", t.defined() ? t.sizes() : at::IntArrayRef{});
  TORCH_CHECK(C < 0 || t.size(0) == C, fn, ": ", name, " must have ", C, " rows, got ", t.size(0));
  TORCH_CHECK(detail::activation_dtype_ok(t.scalar_type()), fn, ": ", name,
              " must be float32, float64 or bfloat16, got ", t.scalar_type());
}

void check_scan(const char* fn, const at::Tensor& x, const CESCoefficients& coef,
                const at::Tensor& mask, Direction direction) {
  TORCH_CHECK(x.defined() && x.dim() == 3, fn, ": x must be [B, L, H], got ",
              x.defined() ? x.sizes() : at::IntArrayRef{});
  TORCH_CHECK(detail::activation_dtype_ok(x.scalar_type()), fn,
              ": x must be float32, float64 or bfloat16, got ", x.scalar_type());
  const int64_t C = direction == Direction::bidirectional ? 2 * x.size(2) : x.size(2);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"q", coef.q},
                                {"mu", coef.mu},
                                {"c", coef.c}}) {
    check_param(fn, name, t, C);
    TORCH_CHECK(detail::param_dtype_fits(t.scalar_type(), x.scalar_type()), fn, ": ", name,
                " dtype ", t.scalar_type(), " does not go with x dtype ", x.scalar_type(),
                " (the same dtype, or float32 with bfloat16 x)");
  }
  check_padding_mask(fn, mask, x.size(0), x.size(1));
}

CESCoefficients widened(const CESCoefficients& c) {
  return {detail::widen(c.q), detail::widen(c.mu), detail::widen(c.c)};
}

at::Tensor re(const at::Tensor& z) { return z.select(1, 0); }
at::Tensor im(const at::Tensor& z) { return z.select(1, 1); }

template <typename T>
cpu::CESScanParams<T> make_params(const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
                                  const at::Tensor& mask, bool bidirectional) {
  cpu::CESScanParams<T> p;
  p.x = x.data_ptr<T>();
  p.mu = mu.data_ptr<T>();
  p.c = c.data_ptr<T>();
  p.mask = mask.numel() > 0 ? reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>()) : nullptr;
  p.B = x.size(0);
  p.L = x.size(1);
  p.H = x.size(2);
  p.bidirectional = bidirectional;
  return p;
}

class CESScanFunction : public torch::autograd::Function<CESScanFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& mu, const at::Tensor& c, const at::Tensor& mask,
                            bool bidirectional) {
    ctx->save_for_backward({x, mu, c, mask});
    ctx->saved_data["bidirectional"] = bidirectional;
    at::Tensor y = at::empty_like(x);
    if (x.numel() == 0) return y;
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "ces_scan_forward", [&] {
      auto p = make_params<scalar_t>(x, mu, c, mask, bidirectional);
      p.y = y.data_ptr<scalar_t>();
      at::parallel_for(0, cpu::ces_work_items(p.B, p.H), 1, [&](int64_t begin, int64_t end) {
        cpu::ces_scan_forward<scalar_t>(p, begin, end);
      });
    });
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &mu = saved[1], &c = saved[2], &mask = saved[3];
    const bool bidirectional = ctx->saved_data["bidirectional"].toBool();
    const at::Tensor gy = grads[0].contiguous();
    at::Tensor gx = at::empty_like(x);
    const auto dopt = x.options().dtype(at::kDouble);
    at::Tensor gmu = at::zeros({x.size(0), mu.size(0), 2}, dopt);
    at::Tensor gc = at::zeros({x.size(0), c.size(0), 2}, dopt);
    if (x.numel() > 0) {
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "ces_scan_backward", [&] {
        auto p = make_params<scalar_t>(x, mu, c, mask, bidirectional);
        p.grad_y = gy.data_ptr<scalar_t>();
        p.grad_x = gx.data_ptr<scalar_t>();
        p.grad_mu = gmu.data_ptr<double>();
        p.grad_c = gc.data_ptr<double>();
        at::parallel_for(0, cpu::ces_work_items(p.B, p.H), 1, [&](int64_t begin, int64_t end) {
          cpu::ces_scan_backward<scalar_t>(p, begin, end);
        });
      });
    } else {
      gx.zero_();
    }
    return {gx, gmu.sum(0).to(mu.scalar_type()), gc.sum(0).to(c.scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

CESCoefficients ces_coefficients(const at::Tensor& log_lambda, const at::Tensor& log_alpha,
                                 const at::Tensor& log_beta, double max_lambda, bool normalize) {
  const char* fn = "ces_coefficients";
  check_param(fn, "log_lambda", log_lambda, -1);
  check_param(fn, "log_alpha", log_alpha, log_lambda.size(0));
  check_param(fn, "log_beta", log_beta, log_lambda.size(0));
  TORCH_CHECK(log_alpha.scalar_type() == log_lambda.scalar_type() &&
                  log_beta.scalar_type() == log_lambda.scalar_type(),
              fn, ": log_lambda, log_alpha and log_beta must share a dtype");
  TORCH_CHECK(max_lambda > 0 && max_lambda <= 1, fn, ": max_lambda must be in (0, 1], got ",
              max_lambda);
  TORCH_CHECK(!normalize || max_lambda < 1, fn,
              ": normalize needs max_lambda < 1 (sqrt(1 - |mu|^2) has no gradient at |mu| = 1)");
  // exp(lambda') = log(lambda), times alpha = e^{a0} + i e^{a1}.
  const at::Tensor mag_w = at::exp(re(log_lambda));
  const at::Tensor wr = mag_w * at::cos(im(log_lambda)), wi = mag_w * at::sin(im(log_lambda));
  const at::Tensor ar = at::exp(re(log_alpha)), ai = at::exp(im(log_alpha));
  at::Tensor qr = wr * ar - wi * ai;
  const at::Tensor qi = wr * ai + wi * ar;
  // Eq. 12 as the authors' code writes it: q + [|e^q| > max] log(max / |e^q|). The indicator
  // carries no gradient, so a constrained channel's Re q gets none (Im q still does).
  const double log_max = std::log(max_lambda);
  const at::Tensor over = (qr > log_max).to(qr.scalar_type());
  qr = qr + over * (log_max - qr);
  const at::Tensor mag = at::exp(qr);
  const at::Tensor mur = mag * at::cos(qi), mui = mag * at::sin(qi);
  const at::Tensor mag_b = at::exp(re(log_beta));
  const at::Tensor br = mag_b * at::cos(im(log_beta)), bi = mag_b * at::sin(im(log_beta));
  at::Tensor cr = br * (1 - mur) + bi * mui;  // beta (1 - mu)
  at::Tensor ci = bi * (1 - mur) - br * mui;
  if (normalize) {
    const at::Tensor f = at::sqrt(1 - mag * mag);
    cr = cr * f;
    ci = ci * f;
  }
  return {at::stack({qr, qi}, 1), at::stack({mur, mui}, 1), at::stack({cr, ci}, 1)};
}

at::Tensor ces_scan_reference(const at::Tensor& x, const CESCoefficients& coef,
                              const at::Tensor& mask, Direction direction) {
  check_scan("ces_scan_reference", x, coef, mask, direction);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(x)) return ces_scan_reference(detail::widen(x), widened(coef), mask, direction).to(at::kBFloat16);
  const int64_t L = x.size(1), H = x.size(2);
  if (x.numel() == 0) return at::zeros_like(x);
  at::Tensor xm = mask.defined() ? x.masked_fill(mask.logical_not().unsqueeze(-1), 0) : x;
  // Vandermonde kernel K[n] = Re(c exp(n q)), [C, L].
  const at::Tensor n = at::arange(L, x.options()).unsqueeze(0);
  const at::Tensor qr = re(coef.q).unsqueeze(1), qi = im(coef.q).unsqueeze(1);
  const at::Tensor decay = at::exp(n * qr);
  const at::Tensor vr = decay * at::cos(n * qi), vi = decay * at::sin(n * qi);
  const at::Tensor kernel = re(coef.c).unsqueeze(1) * vr - im(coef.c).unsqueeze(1) * vi;
  at::Tensor k2l;  // [H, 2L] circular kernel
  if (direction == Direction::causal) {
    k2l = at::constant_pad_nd(kernel, {0, L});
  } else {
    // [K_fwd(0 .. L-1), flip(K_bwd(0 .. L-1))]: position 2L - m holds the backward kernel's
    // lag m (coefficient m - 1), m = 1 .. L.
    k2l = at::cat({kernel.narrow(0, 0, H), kernel.narrow(0, H, H).flip({1})}, 1);
  }
  const at::Tensor xf = at::fft_rfft(xm.permute({0, 2, 1}), 2 * L, -1);
  const at::Tensor kf = at::fft_rfft(k2l, 2 * L, -1);
  at::Tensor y = at::fft_irfft(xf * kf, 2 * L, -1).narrow(-1, 0, L).permute({0, 2, 1});
  if (mask.defined()) y = y.masked_fill(mask.logical_not().unsqueeze(-1), 0);
  return y.contiguous();
}

at::Tensor ces_scan_kernel(const at::Tensor& x, const CESCoefficients& coef, const at::Tensor& mask,
                           Direction direction) {
  check_scan("ces_scan_kernel", x, coef, mask, direction);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(x)) return ces_scan_kernel(detail::widen(x), widened(coef), mask, direction).to(at::kBFloat16);
  return CESScanFunction::apply(x.contiguous(), coef.mu.contiguous(), coef.c.contiguous(),
                                mask.defined() ? mask.contiguous() : at::empty({0}, at::kBool),
                                direction == Direction::bidirectional);
}

at::Tensor ces_scan(const at::Tensor& x, const CESCoefficients& coef, const at::Tensor& mask,
                    Direction direction, Backend backend) {
  return backend == Backend::kernel ? ces_scan_kernel(x, coef, mask, direction)
                                    : ces_scan_reference(x, coef, mask, direction);
}

}  // namespace seqmix::ops
