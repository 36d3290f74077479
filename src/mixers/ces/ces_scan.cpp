// CES in the dispatcher: coefficients, the authors' FFT reference, and seqmix::ces_scan, the
// recurrence kernel (cpu/ces_scan_kernel.cpp) per dispatch key.
#include "seqmix/ops/ces_scan.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <stdexcept>

#include "ops/dispatch.h"
#include "ops/double_backward.h"
#include "ops/low_precision.h"
#include "ces_scan_internal.h"
#include "cpu/ces_scan_kernel.h"

namespace seqmix::ops {

namespace {

void check_param(const char* fn, const char* name, const at::Tensor& t,
                 const c10::SymInt& C) {
  TORCH_CHECK(t.defined() && t.dim() == 2, fn, ": ", name,
              " must be [C, 2] (real, imaginary), got ",
              t.defined() ? t.sym_sizes() : c10::SymIntArrayRef{});
  TORCH_SYM_CHECK(t.sym_size(1).sym_eq(2), fn, ": ", name,
                  " must be [C, 2] (real, imaginary), got ", t.sym_sizes());
  TORCH_SYM_CHECK(C.sym_lt(0).sym_or(t.sym_size(0).sym_eq(C)), fn, ": ", name, " must have ", C,
                  " rows, got ", t.sym_size(0));
  TORCH_CHECK(detail::activation_dtype_ok(t.scalar_type()), fn, ": ", name,
              " must be float32, float64 or bfloat16, got ", t.scalar_type());
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

// ---- CPU ----

at::Tensor ces_scan_cpu(const at::Tensor& x_in, const at::Tensor& mu_in, const at::Tensor& c_in,
                        const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const at::Tensor mask = detail::or_undefined(mask_opt);
  const Direction dir = detail::direction_arg("ces_scan", direction);
  ces_check_scan("ces_scan", x_in, mu_in, c_in, mask, dir);
  // bfloat16 x goes into the kernel as it is (read and written in bfloat16, computed in
  // float32); its coefficients are widened to float32.
  const at::Tensor x = x_in.contiguous(), mu = detail::widen(mu_in).contiguous();
  const at::Tensor c = detail::widen(c_in).contiguous();
  const at::Tensor m = mask.defined() ? mask.contiguous() : at::empty({0}, at::kBool);
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  dispatch_types(x, [&](auto types) {
    using T = typename decltype(types)::T;
    using S = typename decltype(types)::S;
    auto p = make_params<T, S>(x, mu, c, m, dir == Direction::bidirectional);
    p.y = y.data_ptr<S>();
    run_items(p, cpu::ces_scan_forward<T, S>);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ces_scan_backward_cpu(
    const at::Tensor& grad, const at::Tensor& x_in, const at::Tensor& mu_in, const at::Tensor& c_in,
    const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const at::Tensor mask = detail::or_undefined(mask_opt);
  const Direction dir = detail::direction_arg("_ces_scan_backward", direction);
  ces_check_scan("_ces_scan_backward", x_in, mu_in, c_in, mask, dir);
  const at::Tensor x = x_in.contiguous(), mu = detail::widen(mu_in).contiguous();
  const at::Tensor c = detail::widen(c_in).contiguous();
  const at::Tensor m = mask.defined() ? mask.contiguous() : at::empty({0}, at::kBool);
  const at::Tensor gy = grad.to(x.scalar_type()).contiguous();
  at::Tensor gx = at::empty_like(x);
  const auto dopt = x.options().dtype(at::kDouble);
  at::Tensor gmu = at::zeros({x.size(0), mu.size(0), 2}, dopt);
  at::Tensor gc = at::zeros({x.size(0), c.size(0), 2}, dopt);
  if (x.numel() > 0) {
    dispatch_types(x, [&](auto types) {
      using T = typename decltype(types)::T;
      using S = typename decltype(types)::S;
      auto p = make_params<T, S>(x, mu, c, m, dir == Direction::bidirectional);
      p.grad_y = gy.data_ptr<S>();
      p.grad_x = gx.data_ptr<S>();
      p.grad_mu = gmu.data_ptr<double>();
      p.grad_c = gc.data_ptr<double>();
      run_items(p, cpu::ces_scan_backward<T, S>);
    });
  } else {
    gx.zero_();
  }
  return {gx, gmu.sum(0).to(mu_in.scalar_type()), gc.sum(0).to(c_in.scalar_type())};
}

// ---- Meta ----

at::Tensor ces_scan_meta(const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
                         const std::optional<at::Tensor>& mask, c10::string_view direction) {
  ces_check_scan("ces_scan", x, mu, c, detail::or_undefined(mask),
             detail::direction_arg("ces_scan", direction));
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ces_scan_backward_meta(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
    const std::optional<at::Tensor>& mask, c10::string_view direction) {
  ces_check_scan("_ces_scan_backward", x, mu, c, detail::or_undefined(mask),
             detail::direction_arg("_ces_scan_backward", direction));
  (void)grad;
  return {at::empty_like(x, at::MemoryFormat::Contiguous),
          at::empty_like(mu, at::MemoryFormat::Contiguous),
          at::empty_like(c, at::MemoryFormat::Contiguous)};
}

// ---- Autograd ----

using ScanSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, c10::string_view);
using BackwardSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const std::optional<at::Tensor>&, c10::string_view);

class CESScanFunction : public torch::autograd::Function<CESScanFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& mu, const at::Tensor& c,
                            const std::optional<at::Tensor>& mask, const std::string& direction) {
    ctx->save_for_backward({x, mu, c, detail::or_undefined(mask)});
    ctx->saved_data["direction"] = direction;
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op = detail::find_op<ScanSignature>("seqmix::ces_scan");
    return op.call(x, mu, c, mask, direction);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &mu = saved[1], &c = saved[2], &mask = saved[3];
    const std::string direction = ctx->saved_data["direction"].toStringRef();
    if (detail::differentiable_backward()) {
      auto g = detail::reference_backward(
          [&](const std::vector<at::Tensor>& in) {
            return ces_scan_reference(in[0], CESCoefficients{at::Tensor(), in[1], in[2]}, mask,
                                      detail::direction_arg("ces_scan", direction));
          },
          {x, mu, c}, grads[0]);
      return {g[0], g[1], g[2], at::Tensor(), at::Tensor()};
    }
    static const auto op = detail::find_op<BackwardSignature>("seqmix::_ces_scan_backward");
    auto [gx, gmu, gc] = op.call(grads[0], x, mu, c, detail::optional(mask), direction);
    return {gx, gmu, gc, at::Tensor(), at::Tensor()};
  }
};

at::Tensor ces_scan_autograd(const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
                             const std::optional<at::Tensor>& mask, c10::string_view direction) {
  return CESScanFunction::apply(x, mu, c, mask, std::string(direction));
}

// ---- AutocastCPU: the op computes in the dtypes its contract names (common.h) ----

at::Tensor ces_scan_autocast(const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
                             const std::optional<at::Tensor>& mask, c10::string_view direction) {
  const detail::AutocastOff autocast_off;
  static const auto op = detail::find_op<ScanSignature>("seqmix::ces_scan");
  return op.call(x, mu, c, mask, direction);
}

at::Tensor reference_op(const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
                        const std::optional<at::Tensor>& mask, c10::string_view direction) {
  return ces_scan_reference(x, CESCoefficients{at::Tensor(), mu, c}, detail::or_undefined(mask),
                            detail::direction_arg("ces_scan_reference", direction));
}

}  // namespace

void ces_check_scan(const char* fn, const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
                const at::Tensor& mask, Direction direction) {
  TORCH_CHECK(x.defined() && x.dim() == 3, fn, ": x must be [B, L, H], got ",
              x.defined() ? x.sym_sizes() : c10::SymIntArrayRef{});
  TORCH_CHECK(detail::activation_dtype_ok(x.scalar_type()), fn,
              ": x must be float32, float64 or bfloat16, got ", x.scalar_type());
  const c10::SymInt C = direction == Direction::bidirectional ? 2 * x.sym_size(2) : x.sym_size(2);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"mu", mu}, {"c", c}}) {
    check_param(fn, name, t, C);
    TORCH_CHECK(detail::param_dtype_fits(t.scalar_type(), x.scalar_type()), fn, ": ", name,
                " dtype ", t.scalar_type(), " does not go with x dtype ", x.scalar_type(),
                " (the same dtype, or float32 with bfloat16 x)");
    TORCH_CHECK(t.device() == x.device(), fn, ": ", name, " is on ", t.device(), " but x on ",
                x.device());
  }
  if (mask.defined())
    TORCH_CHECK(mask.device() == x.device(), fn, ": mask is on ", mask.device(), " but x on ",
                x.device());
  detail::check_padding_mask(fn, mask, x.sym_size(0), x.sym_size(1));
}


CESCoefficients ces_coefficients(const at::Tensor& log_lambda, const at::Tensor& log_alpha,
                                 const at::Tensor& log_beta, double max_lambda, bool normalize) {
  const char* fn = "ces_coefficients";
  check_param(fn, "log_lambda", log_lambda, -1);
  check_param(fn, "log_alpha", log_alpha, log_lambda.sym_size(0));
  check_param(fn, "log_beta", log_beta, log_lambda.sym_size(0));
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
  ces_check_scan("ces_scan_reference", x, coef.mu, coef.c, mask, direction);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(x))
    return ces_scan_reference(detail::widen(x),
                              CESCoefficients{at::Tensor(), detail::widen(coef.mu),
                                              detail::widen(coef.c)},
                              mask, direction)
        .to(at::kBFloat16);
  // Concrete sizes: the FFT length depends on L, so torch.compile specialises on it.
  const int64_t L = detail::concrete(x.sym_size(1)), H = detail::concrete(x.sym_size(2));
  if (L == 0 || H == 0 || detail::concrete(x.sym_size(0)) == 0) return at::zeros_like(x);
  at::Tensor xm = mask.defined() ? x.masked_fill(mask.logical_not().unsqueeze(-1), 0) : x;
  // Vandermonde kernel K[n] = Re(c mu^n) = Re(c |mu|^n e^{i n arg mu}), [C, L] (|mu|^0 = 1
  // even for mu = 0).
  const at::Tensor n = at::arange(L, x.options()).unsqueeze(0);
  const at::Tensor mr = re(coef.mu), mi = im(coef.mu);
  const at::Tensor mag = at::sqrt(mr * mr + mi * mi).unsqueeze(1);
  const at::Tensor angle = at::atan2(mi, mr).unsqueeze(1);
  const at::Tensor decay = at::pow(mag, n);
  const at::Tensor vr = decay * at::cos(n * angle), vi = decay * at::sin(n * angle);
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
  static const auto op = detail::find_op<ScanSignature>("seqmix::ces_scan");
  return op.call(x, coef.mu, coef.c, detail::optional(mask), to_string(direction));
}

at::Tensor ces_scan(const at::Tensor& x, const CESCoefficients& coef, const at::Tensor& mask,
                    Direction direction, Backend backend) {
  if (backend == Backend::kernel) return ces_scan_kernel(x, coef, mask, direction);
  static const auto op = detail::find_op<ScanSignature>("seqmix::ces_scan_reference");
  return op.call(x, coef.mu, coef.c, detail::optional(mask), to_string(direction));
}

// The schemas: ces_scan is implemented per dispatch key above (its backward is the op
// _ces_scan_backward); the reference, the authors' FFT form, is ATen code
// (CompositeImplicitAutograd). Both are functions of x, mu and c (eq. 10's lambda and c).
TORCH_LIBRARY_FRAGMENT(seqmix, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def(
      "ces_scan(Tensor x, Tensor mu, Tensor c, Tensor? mask=None, str direction=\"causal\") -> "
      "Tensor",
      tags);
  m.def(
      "ces_scan_reference(Tensor x, Tensor mu, Tensor c, Tensor? mask=None, "
      "str direction=\"causal\") -> Tensor",
      tags);
  m.def(
      "_ces_scan_backward(Tensor grad, Tensor x, Tensor mu, Tensor c, Tensor? mask, "
      "str direction) -> (Tensor, Tensor, Tensor)",
      tags);
  m.impl("ces_scan_reference", c10::DispatchKey::CompositeImplicitAutograd, &reference_op);
}

TORCH_LIBRARY_IMPL(seqmix, CPU, m) {
  m.impl("ces_scan", &ces_scan_cpu);
  m.impl("_ces_scan_backward", &ces_scan_backward_cpu);
}

TORCH_LIBRARY_IMPL(seqmix, Meta, m) {
  m.impl("ces_scan", &ces_scan_meta);
  m.impl("_ces_scan_backward", &ces_scan_backward_meta);
}

TORCH_LIBRARY_IMPL(seqmix, Autograd, m) { m.impl("ces_scan", &ces_scan_autograd); }

TORCH_LIBRARY_IMPL(seqmix, AutocastCPU, m) { m.impl("ces_scan", &ces_scan_autocast); }

TORCH_LIBRARY_IMPL(seqmix, AutocastCUDA, m) { m.impl("ces_scan", &ces_scan_autocast); }

}  // namespace seqmix::ops
