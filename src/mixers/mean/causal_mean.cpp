// seqmix::causal_mean in the dispatcher: its schema, the ATen reference, and the kernel per
// dispatch key (CPU, Meta, Autograd). Definition in causal_mean.h.
#include "causal_mean.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

#include "cpu/causal_mean_kernel.h"
#include "ops/dispatch.h"
#include "ops/double_backward.h"
#include "ops/low_precision.h"

namespace seqmix::mixers::mean {

namespace {

void check_inputs(const char* fn, const at::Tensor& x, int64_t window, const at::Tensor& mask) {
  TORCH_CHECK(x.dim() == 3, fn, ": x must be [B, L, D], got ", x.sym_sizes());
  TORCH_CHECK(ops::detail::activation_dtype_ok(x.scalar_type()), fn,
              ": x must be float32, float64 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK_VALUE(window >= 1, fn, ": window must be >= 1, got ", window);
  ops::detail::check_padding_mask(fn, mask, x.sym_size(0), x.sym_size(1));
}

// 1 valid / 0 padded as x's dtype, [B, L] (all ones without a mask).
at::Tensor valid_of(const at::Tensor& x, const at::Tensor& mask) {
  return mask.defined() ? mask.to(x.scalar_type())
                        : at::ones({x.size(0), x.size(1)}, x.options());
}

// Sum of the last `window` rows along dim 1 of v [B, L, ...] (zeros before the start).
at::Tensor window_sum(const at::Tensor& v, int64_t window) {
  if (v.sym_size(1) == 0) return v.clone();  // no positions: unfold needs at least one window
  std::vector<int64_t> pad(2 * (v.dim() - 1), 0);
  pad[pad.size() - 2] = window - 1;  // at the front of dim 1
  return at::constant_pad_nd(v, pad).unfold(1, window, 1).sum(-1);
}

// 1 / |S(b, t)| where position t has an output, else 0: [B, L].
at::Tensor inverse_counts(const at::Tensor& valid, int64_t window) {
  const at::Tensor count = window_sum(valid, window);
  return at::where(valid > 0, at::reciprocal(count.clamp_min(1)), at::zeros_like(count));
}

}  // namespace

at::Tensor causal_mean_reference(const at::Tensor& x_in, int64_t window,
                                 const std::optional<at::Tensor>& mask) {
  const at::Tensor m = ops::detail::or_undefined(mask);
  check_inputs("causal_mean_reference", x_in, window, m);
  const at::Tensor x = ops::detail::widen(x_in);  // bfloat16: computed in float32
  const at::Tensor valid = valid_of(x, m);
  return (window_sum(x * valid.unsqueeze(-1), window) *
          inverse_counts(valid, window).unsqueeze(-1))
      .to(x_in.scalar_type());
}

namespace {

template <typename T>
cpu::CausalMeanParams<T> params(const at::Tensor& x, int64_t window, const at::Tensor& valid,
                                const at::Tensor& inv, bool masked) {
  cpu::CausalMeanParams<T> p;
  p.B = x.size(0), p.L = x.size(1), p.D = x.size(2), p.window = window;
  p.valid = masked ? valid.data_ptr<T>() : nullptr;
  p.inv_count = inv.data_ptr<T>();
  return p;
}

// Rows per task: enough work per thread for a window's sums.
int64_t grain(int64_t D, int64_t window) { return std::max<int64_t>(1, 16384 / (D * window)); }

at::Tensor causal_mean_cpu(const at::Tensor& x_in, int64_t window,
                           const std::optional<at::Tensor>& mask) {
  const at::Tensor m = ops::detail::or_undefined(mask);
  check_inputs("causal_mean", x_in, window, m);
  const at::Tensor x = ops::detail::widen(x_in).contiguous();
  const at::Tensor valid = valid_of(x, m).contiguous();
  const at::Tensor inv = inverse_counts(valid, window).contiguous();
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "causal_mean", [&] {
    const auto p = params<scalar_t>(x, window, valid, inv, m.defined());
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, p.B * p.L, grain(p.D, window), [&](int64_t begin, int64_t end) {
      cpu::causal_mean_forward<scalar_t>(p, xp, op, begin, end);
    });
  });
  return out.to(x_in.scalar_type());  // bfloat16: rounded once
}

at::Tensor causal_mean_backward_cpu(const at::Tensor& grad_in, const at::Tensor& x_in,
                                    int64_t window, const std::optional<at::Tensor>& mask) {
  const at::Tensor m = ops::detail::or_undefined(mask);
  check_inputs("_causal_mean_backward", x_in, window, m);
  const at::Tensor x = ops::detail::widen(x_in);
  TORCH_CHECK(grad_in.sizes() == x.sizes(), "_causal_mean_backward: grad must be ", x.sizes(),
              ", got ", grad_in.sizes());
  const at::Tensor grad = grad_in.to(x.scalar_type()).contiguous();
  const at::Tensor valid = valid_of(x, m).contiguous();
  const at::Tensor inv = inverse_counts(valid, window).contiguous();
  at::Tensor grad_x = at::empty_like(grad, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "_causal_mean_backward", [&] {
    const auto p = params<scalar_t>(x, window, valid, inv, m.defined());
    const scalar_t* gp = grad.data_ptr<scalar_t>();
    scalar_t* gxp = grad_x.data_ptr<scalar_t>();
    at::parallel_for(0, p.B * p.L, grain(p.D, window), [&](int64_t begin, int64_t end) {
      cpu::causal_mean_backward<scalar_t>(p, gp, gxp, begin, end);
    });
  });
  return grad_x.to(x_in.scalar_type());
}

// ---- Meta: shapes and dtypes only ----

at::Tensor causal_mean_meta(const at::Tensor& x, int64_t window,
                            const std::optional<at::Tensor>& mask) {
  check_inputs("causal_mean", x, window, ops::detail::or_undefined(mask));
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}

at::Tensor causal_mean_backward_meta(const at::Tensor& grad, const at::Tensor& x,
                                     int64_t window, const std::optional<at::Tensor>& mask) {
  check_inputs("_causal_mean_backward", x, window, ops::detail::or_undefined(mask));
  (void)grad;
  return at::empty_like(x, at::MemoryFormat::Contiguous);
}

// ---- Autograd: the hand-written backward, as its own op ----

using Signature = at::Tensor(const at::Tensor&, int64_t, const std::optional<at::Tensor>&);
using BackwardSignature = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                     const std::optional<at::Tensor>&);

class CausalMeanFunction : public torch::autograd::Function<CausalMeanFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t window, const std::optional<at::Tensor>& mask) {
    ctx->save_for_backward({x, ops::detail::or_undefined(mask)});
    ctx->saved_data["window"] = window;
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op = ops::detail::find_op<Signature>("seqmix::causal_mean");
    return op.call(x, window, mask);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &mask = saved[1];
    const int64_t window = ctx->saved_data["window"].toInt();
    if (ops::detail::differentiable_backward()) {  // create_graph: differentiate the reference
      auto g = ops::detail::reference_backward(
          [&](const std::vector<at::Tensor>& in) {
            return causal_mean_reference(in[0], window, ops::detail::optional(mask));
          },
          {x}, grads[0]);
      return {g[0], at::Tensor(), at::Tensor()};
    }
    static const auto op =
        ops::detail::find_op<BackwardSignature>("seqmix::_causal_mean_backward");
    return {op.call(grads[0], x, window, ops::detail::optional(mask)), at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor causal_mean_autograd(const at::Tensor& x, int64_t window,
                                const std::optional<at::Tensor>& mask) {
  return CausalMeanFunction::apply(x, window, mask);
}

// ---- CUDA: ATen ops (the reference and its transpose) ----
// The causal mean is the ablation's mixer, not a hot path: on CUDA it runs as the reference,
// and its backward as the reference's transpose, dx_s = valid_s sum_{t in [s, s + window)}
// g_t / |S(b, t)|.

at::Tensor causal_mean_cuda(const at::Tensor& x, int64_t window,
                            const std::optional<at::Tensor>& mask) {
  check_inputs("causal_mean", x, window, ops::detail::or_undefined(mask));
  return causal_mean_reference(x, window, mask).contiguous();
}

at::Tensor causal_mean_backward_cuda(const at::Tensor& grad, const at::Tensor& x_in,
                                     int64_t window, const std::optional<at::Tensor>& mask) {
  const at::Tensor m = ops::detail::or_undefined(mask);
  check_inputs("_causal_mean_backward", x_in, window, m);
  const at::Tensor x = ops::detail::widen(x_in);
  const at::Tensor valid = valid_of(x, m);
  const at::Tensor g = grad.to(x.scalar_type()) * inverse_counts(valid, window).unsqueeze(-1);
  return (window_sum(g.flip({1}), window).flip({1}) * valid.unsqueeze(-1))
      .to(x_in.scalar_type())
      .contiguous();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(seqmix, m) {
  m.def("causal_mean(Tensor x, int window, Tensor? mask=None) -> Tensor");
  m.def("causal_mean_reference(Tensor x, int window, Tensor? mask=None) -> Tensor");
  m.def("_causal_mean_backward(Tensor grad, Tensor x, int window, Tensor? mask) -> Tensor");
}

TORCH_LIBRARY_IMPL(seqmix, CompositeImplicitAutograd, m) {
  m.impl("causal_mean_reference", &causal_mean_reference);
}

TORCH_LIBRARY_IMPL(seqmix, CPU, m) {
  m.impl("causal_mean", &causal_mean_cpu);
  m.impl("_causal_mean_backward", &causal_mean_backward_cpu);
}

TORCH_LIBRARY_IMPL(seqmix, Meta, m) {
  m.impl("causal_mean", &causal_mean_meta);
  m.impl("_causal_mean_backward", &causal_mean_backward_meta);
}

TORCH_LIBRARY_IMPL(seqmix, CUDA, m) {
  m.impl("causal_mean", &causal_mean_cuda);
  m.impl("_causal_mean_backward", &causal_mean_backward_cuda);
}

TORCH_LIBRARY_IMPL(seqmix, Autograd, m) { m.impl("causal_mean", &causal_mean_autograd); }

at::Tensor causal_mean(const at::Tensor& x, int64_t window, const at::Tensor& mask,
                       ops::Backend backend) {
  static const auto kernel = ops::detail::find_op<Signature>("seqmix::causal_mean");
  static const auto reference = ops::detail::find_op<Signature>("seqmix::causal_mean_reference");
  return (backend == ops::Backend::kernel ? kernel : reference)
      .call(x, window, ops::detail::optional(mask));
}

}  // namespace seqmix::mixers::mean
