// CES: coefficients, the authors' FFT reference, and the recurrence kernel as an autograd
// Function (src/ops/cpu/ces_scan_kernel.cpp).
#include "seqmix/ops/ces_scan.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <cmath>
#include <stdexcept>

#include "check_mask.h"
#include "double_backward.h"
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

template <typename T, typename S>
cpu::CESScanParams<T, S> make_params(const at::Tensor& x, const at::Tensor& mu,
                                     const at::Tensor& c, const at::Tensor& mask,
                                     bool bidirectional) {
  cpu::CESScanParams<T, S> p;
  p.x = x.data_ptr<S>();
  p.mu = mu.data_ptr<T>();
  p.c = c.data_ptr<T>();
  p.mask = mask.numel() > 0 ? reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>()) : nullptr;
  p.B = x.size(0);
  p.L = x.size(1);
  p.H = x.size(2);
  p.bidirectional = bidirectional;
  return p;
}

// The arithmetic type T and the storage type S of one kernel instance.
template <typename TT, typename SS>
struct KernelTypes {
  using T = TT;
  using S = SS;
};

// Calls f(KernelTypes<T, S>{}) for x's dtype: (float, float), (double, double), or
// (float, bfloat16).
template <typename F>
void dispatch_types(const at::Tensor& x, F&& f) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return f(KernelTypes<float, float>{});
    case at::kDouble:
      return f(KernelTypes<double, double>{});
    case at::kBFloat16:
      return f(KernelTypes<float, c10::BFloat16>{});
    default:
      TORCH_CHECK(false, "ces_scan_kernel: unexpected dtype ", x.scalar_type());
  }
}

// Runs the kernel's items over LibTorch's threads, each with its own `acc` buffer when the
// kernel needs one (allocated through ATen, so memory accounting sees it).
template <typename T, typename S, typename Kernel>
void run_items(const cpu::CESScanParams<T, S>& p, Kernel kernel) {
  const int64_t acc_elems = cpu::ces_scratch_elems(p);
  at::parallel_for(0, cpu::ces_work_items(p.B, p.H), 1, [&](int64_t begin, int64_t end) {
    at::Tensor acc;
    if (acc_elems > 0) acc = at::empty({acc_elems}, at::CppTypeToScalarType<T>::value);
    kernel(p, begin, end, acc_elems > 0 ? acc.data_ptr<T>() : nullptr);
  });
}

class CESScanFunction : public torch::autograd::Function<CESScanFunction> {
 public:
  // x is float32, float64 or bfloat16; mu and c are float32 with bfloat16 x, else x's dtype.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& mu, const at::Tensor& c, const at::Tensor& mask,
                            bool bidirectional) {
    ctx->save_for_backward({x, mu, c, mask});
    ctx->saved_data["bidirectional"] = bidirectional;
    at::Tensor y = at::empty_like(x);
    if (x.numel() == 0) return y;
    dispatch_types(x, [&](auto types) {
      using T = typename decltype(types)::T;
      using S = typename decltype(types)::S;
      auto p = make_params<T, S>(x, mu, c, mask, bidirectional);
      p.y = y.data_ptr<S>();
      run_items(p, cpu::ces_scan_forward<T, S>);
    });
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &mu = saved[1], &c = saved[2], &mask = saved[3];
    const bool bidirectional = ctx->saved_data["bidirectional"].toBool();
    if (detail::differentiable_backward()) {
      // The reference reads q = log mu (any branch: only exp(n q) = mu^n enters it).
      auto g = detail::reference_backward(
          [&](const std::vector<at::Tensor>& in) {
            const at::Tensor& m = in[1];
            const at::Tensor mr = m.select(1, 0), mi = m.select(1, 1);
            const at::Tensor q = at::stack({0.5 * at::log(mr * mr + mi * mi), at::atan2(mi, mr)}, 1);
            return ces_scan_reference(in[0], CESCoefficients{q, m, in[2]},
                                      mask.numel() ? mask : at::Tensor(),
                                      bidirectional ? Direction::bidirectional : Direction::causal);
          },
          {x, mu, c}, grads[0]);
      return {g[0], g[1], g[2], at::Tensor(), at::Tensor()};
    }
    const at::Tensor gy = grads[0].to(x.scalar_type()).contiguous();
    at::Tensor gx = at::empty_like(x);
    const auto dopt = x.options().dtype(at::kDouble);
    at::Tensor gmu = at::zeros({x.size(0), mu.size(0), 2}, dopt);
    at::Tensor gc = at::zeros({x.size(0), c.size(0), 2}, dopt);
    if (x.numel() > 0) {
      dispatch_types(x, [&](auto types) {
        using T = typename decltype(types)::T;
        using S = typename decltype(types)::S;
        auto p = make_params<T, S>(x, mu, c, mask, bidirectional);
        p.grad_y = gy.data_ptr<S>();
        p.grad_x = gx.data_ptr<S>();
        p.grad_mu = gmu.data_ptr<double>();
        p.grad_c = gc.data_ptr<double>();
        run_items(p, cpu::ces_scan_backward<T, S>);
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
  // bfloat16 x goes into the kernel as it is (read and written in bfloat16, computed in
  // float32); its coefficients are widened to float32.
  return CESScanFunction::apply(x.contiguous(), detail::widen(coef.mu).contiguous(),
                                detail::widen(coef.c).contiguous(),
                                mask.defined() ? mask.contiguous() : at::empty({0}, at::kBool),
                                direction == Direction::bidirectional);
}

at::Tensor ces_scan(const at::Tensor& x, const CESCoefficients& coef, const at::Tensor& mask,
                    Direction direction, Backend backend) {
  return backend == Backend::kernel ? ces_scan_kernel(x, coef, mask, direction)
                                    : ces_scan_reference(x, coef, mask, direction);
}

}  // namespace seqmix::ops
