// Softmax attention in the dispatcher: the literal ATen reference, and seqmix::attention, the
// fused kernel (cpu/attention_kernel_impl.h) per dispatch key.
#include "seqmix/ops/attention.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <stdexcept>
#include <limits>
#include <memory>

#include "ops/dispatch.h"
#include "ops/double_backward.h"
#include "ops/low_precision.h"
#include "cpu/attention_kernel.h"

namespace seqmix::ops {

namespace {

void check_inputs(const char* fn, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& key_mask) {
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"q", q},
                                {"k", k},
                                {"v", v}}) {
    TORCH_CHECK(t.defined() && t.dim() == 4, fn, ": ", name, " must be [B, H, L, d_head], got ",
                t.defined() ? t.sym_sizes() : c10::SymIntArrayRef{});
    TORCH_CHECK(t.device() == q.device(), fn, ": ", name, " is on ", t.device(), " but q on ",
                q.device());
    TORCH_CHECK(detail::activation_dtype_ok(t.scalar_type()), fn, ": ", name,
                " must be float32, float64 or bfloat16, got ", t.scalar_type());
    TORCH_SYM_CHECK(detail::same_sizes(t, q), fn, ": ", name, " is ", t.sym_sizes(),
                    " but q is ", q.sym_sizes());
    TORCH_CHECK(t.scalar_type() == q.scalar_type(), fn, ": ", name, " dtype ", t.scalar_type(),
                " differs from q dtype ", q.scalar_type());
  }
  detail::check_padding_mask(fn, key_mask, q.sym_size(0), q.sym_size(2));
  TORCH_CHECK(!key_mask.defined() || key_mask.device() == q.device(), fn,
              ": key_mask is on ", key_mask.device(), " but q on ", q.device());
}

// Kernel parameters for q, k, v of dtype T, or of bfloat16 with T = float.
template <typename T>
cpu::AttentionParams<T> make_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& key_mask, bool causal) {
  cpu::AttentionParams<T> p;
  if (detail::is_bf16(q)) {
    p.bf16.q = detail::bf16_bits(q);
    p.bf16.k = detail::bf16_bits(k);
    p.bf16.v = detail::bf16_bits(v);
  } else {
    p.q = q.data_ptr<T>();
    p.k = k.data_ptr<T>();
    p.v = v.data_ptr<T>();
  }
  p.key_mask =
      key_mask.numel() > 0 ? reinterpret_cast<const uint8_t*>(key_mask.data_ptr<bool>()) : nullptr;
  p.H = q.size(1);
  p.BH = q.size(0) * p.H;
  p.L = q.size(2);
  p.dh = q.size(3);
  p.scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(p.dh)));
  p.causal = causal;
  return p;
}

// Calls f(T{}) with T the kernel's arithmetic type for q's dtype: float for float32 and
// bfloat16 (whose inputs the kernel reads as they are), double for float64.
template <typename F>
void dispatch_arithmetic(const at::Tensor& q, F&& f) {
  if (q.scalar_type() == at::kDouble) return f(double{});
  return f(float{});
}

// ---- CPU ----

// (out, lse): out in the arithmetic type (float32 for bfloat16 inputs), as backward reads
// it; lse [B, H, L] the log-sum-exp of each row's scores.
std::tuple<at::Tensor, at::Tensor> attention_forward_cpu(const at::Tensor& q_in,
                                                         const at::Tensor& k_in,
                                                         const at::Tensor& v_in,
                                                         const std::optional<at::Tensor>& mask_opt,
                                                         c10::string_view direction) {
  const at::Tensor key_mask = detail::or_undefined(mask_opt);
  check_inputs("attention", q_in, k_in, v_in, key_mask);
  const bool causal = detail::direction_arg("attention", direction) == Direction::causal;
  const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const at::Tensor m = key_mask.defined() ? key_mask.contiguous() : at::empty({0}, at::kBool);
  const auto arith = detail::is_bf16(q) ? at::kFloat : q.scalar_type();
  // Every row is written (0 for a row without keys).
  at::Tensor o = at::empty(q.sizes(), q.options().dtype(arith));
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(arith));
  if (q.numel() == 0) return {o, lse};
  dispatch_arithmetic(q, [&](auto zero) {
    using T = decltype(zero);
    auto p = make_params<T>(q, k, v, m, causal);
    p.o = o.data_ptr<T>();
    p.lse = lse.data_ptr<T>();
    at::parallel_for(0, p.BH, 1, [&](int64_t begin, int64_t end) {
      // Uninitialised: the kernel zeroes its scratch itself.
      std::unique_ptr<T[]> scratch(new T[cpu::attention_scratch_elems(p, false)]);
      cpu::attention_forward<T>(p, begin, end, scratch.get());
    });
  });
  // NaN in, NaN out, as the reference: a row whose scores are not finite (a non-finite
  // query, or finite q and k whose product overflows) has no log-sum-exp, and the kernel's
  // running maximum would take it for a row without keys (a row of 0).
  const at::Tensor bad = at::isfinite(lse).logical_not();  // [B, H, L]
  if (bad.any().item<bool>()) {
    at::Tensor rows = bad;
    if (key_mask.defined()) {  // only rows that see a key: the others are 0 there too
      const at::Tensor sees = causal ? key_mask.to(at::kLong).cumsum(-1).gt(0)
                                     : key_mask.any(-1, true).expand_as(key_mask);
      rows = rows.logical_and(sees.unsqueeze(1));
    }
    o.masked_fill_(rows.unsqueeze(-1), std::numeric_limits<double>::quiet_NaN());
  }
  return {o, lse};
}

at::Tensor attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& key_mask, c10::string_view direction) {
  return std::get<0>(attention_forward_cpu(q, k, v, key_mask, direction)).to(q.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cpu(
    const at::Tensor& grad, const at::Tensor& q_in, const at::Tensor& k_in,
    const at::Tensor& v_in, const std::optional<at::Tensor>& mask_opt, const at::Tensor& o_in,
    const at::Tensor& lse_in, c10::string_view direction) {
  const at::Tensor key_mask = detail::or_undefined(mask_opt);
  check_inputs("_attention_backward", q_in, k_in, v_in, key_mask);
  const bool causal =
      detail::direction_arg("_attention_backward", direction) == Direction::causal;
  const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const at::Tensor o = o_in.contiguous(), lse = lse_in.contiguous();
  const at::Tensor m = key_mask.defined() ? key_mask.contiguous() : at::empty({0}, at::kBool);
  const at::Tensor go = grad.to(q.scalar_type()).contiguous();
  at::Tensor gq = at::empty_like(o), gk = at::empty_like(o), gv = at::empty_like(o);
  if (q.numel() > 0) {
    dispatch_arithmetic(q, [&](auto zero) {
      using T = decltype(zero);
      auto p = make_params<T>(q, k, v, m, causal);
      p.o = const_cast<T*>(o.data_ptr<T>());
      p.lse = const_cast<T*>(lse.data_ptr<T>());
      if (detail::is_bf16(go))
        p.bf16.grad_o = detail::bf16_bits(go);
      else
        p.grad_o = go.data_ptr<T>();
      p.grad_q = gq.data_ptr<T>();
      p.grad_k = gk.data_ptr<T>();
      p.grad_v = gv.data_ptr<T>();
      at::parallel_for(0, p.BH, 1, [&](int64_t begin, int64_t end) {
        std::unique_ptr<T[]> scratch(new T[cpu::attention_scratch_elems(p, true)]);
        cpu::attention_backward<T>(p, begin, end, scratch.get());
      });
    });
  }
  const auto out = q.scalar_type();
  return {gq.to(out), gk.to(out), gv.to(out)};
}

// ---- Meta ----

std::tuple<at::Tensor, at::Tensor> attention_forward_meta(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_mask, c10::string_view direction) {
  check_inputs("attention", q, k, v, detail::or_undefined(key_mask));
  detail::direction_arg("attention", direction);
  const auto arith = detail::is_bf16(q) ? at::kFloat : q.scalar_type();
  return {at::empty_symint(q.sym_sizes(), q.options().dtype(arith)),
          at::empty_symint({q.sym_size(0), q.sym_size(1), q.sym_size(2)},
                           q.options().dtype(arith))};
}

at::Tensor attention_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::optional<at::Tensor>& key_mask, c10::string_view direction) {
  check_inputs("attention", q, k, v, detail::or_undefined(key_mask));
  detail::direction_arg("attention", direction);
  return at::empty_symint(q.sym_sizes(), q.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_meta(
    const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_mask, const at::Tensor& o, const at::Tensor& lse,
    c10::string_view direction) {
  check_inputs("_attention_backward", q, k, v, detail::or_undefined(key_mask));
  detail::direction_arg("_attention_backward", direction);
  (void)grad, (void)o, (void)lse;
  return {at::empty_symint(q.sym_sizes(), q.options()),
          at::empty_symint(q.sym_sizes(), q.options()),
          at::empty_symint(q.sym_sizes(), q.options())};
}

// ---- Autograd ----

using ForwardSignature = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                            const at::Tensor&,
                                                            const std::optional<at::Tensor>&,
                                                            c10::string_view);
using BackwardSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&, c10::string_view);
using AttentionSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                      const std::optional<at::Tensor>&, c10::string_view);

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  // With bfloat16 inputs the kernel computes in float32 and rounds its output once; the
  // float32 output is what backward reads.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& key_mask,
                            const std::string& direction) {
    at::Tensor o, lse;
    {
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      static const auto op = detail::find_op<ForwardSignature>("seqmix::_attention_forward");
      std::tie(o, lse) = op.call(q, k, v, key_mask, direction);
    }
    ctx->save_for_backward({q, k, v, detail::or_undefined(key_mask), o, lse});
    ctx->saved_data["direction"] = direction;
    return o.to(q.scalar_type());
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &key_mask = saved[3],
                     &o = saved[4], &lse = saved[5];
    const std::string direction = ctx->saved_data["direction"].toStringRef();
    if (detail::differentiable_backward()) {
      auto g = detail::reference_backward(
          [&](const std::vector<at::Tensor>& in) {
            return attention_reference(in[0], in[1], in[2], key_mask,
                                       detail::direction_arg("attention", direction));
          },
          {q, k, v}, grads[0]);
      return {g[0], g[1], g[2], at::Tensor(), at::Tensor()};
    }
    static const auto op = detail::find_op<BackwardSignature>("seqmix::_attention_backward");
    auto [gq, gk, gv] = op.call(grads[0], q, k, v, detail::optional(key_mask), o, lse, direction);
    return {gq, gk, gv, at::Tensor(), at::Tensor()};
  }
};

// ---- CUDA: PyTorch's scaled_dot_product_attention ----
// On CUDA the op is SDPA, which picks FlashAttention (bfloat16, no key mask) or the
// memory-efficient kernel (with a mask, or float32), autograd included: PyTorch's own kernels
// are what a GPU user has. A key mask becomes a boolean attn_mask; a query that sees no key
// at all (the CPU kernel's and the reference's output 0) is let see every key, so that SDPA
// stays finite, and its output is then multiplied by 0 (its gradients are 0 too).
at::Tensor attention_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::optional<at::Tensor>& key_mask_opt,
                          c10::string_view direction_s) {
  const at::Tensor key_mask = detail::or_undefined(key_mask_opt);
  check_inputs("attention", q, k, v, key_mask);
  const bool causal = detail::direction_arg("attention", direction_s) == Direction::causal;
  if (!key_mask.defined())
    return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, causal);
  const int64_t B = q.size(0), L = q.size(2);
  at::Tensor allowed = key_mask.view({B, 1, 1, L});
  if (causal)
    allowed = allowed.logical_and(
        at::ones({L, L}, q.options().dtype(at::kBool)).tril().view({1, 1, L, L}));
  const at::Tensor has_key = allowed.any(-1, true);
  const at::Tensor o = at::scaled_dot_product_attention(
      q, k, v, allowed.logical_or(has_key.logical_not()), 0.0, false);
  return o * has_key.to(o.scalar_type());
}

at::Tensor attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::optional<at::Tensor>& key_mask,
                              c10::string_view direction) {
  if (q.is_cuda()) return attention_sdpa(q, k, v, key_mask, direction);
  return AttentionFunction::apply(q, k, v, key_mask, std::string(direction));
}

// ---- AutocastCPU and AutocastCUDA: the op computes in the dtypes its contract names (common.h) ----

at::Tensor attention_autocast(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::optional<at::Tensor>& key_mask,
                              c10::string_view direction) {
  const detail::AutocastOff autocast_off;
  static const auto op = detail::find_op<AttentionSignature>("seqmix::attention");
  return op.call(q, k, v, key_mask, direction);
}

at::Tensor reference_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& key_mask, c10::string_view direction,
                        double dropout) {
  return attention_reference(q, k, v, detail::or_undefined(key_mask),
                             detail::direction_arg("attention_reference", direction), dropout);
}

}  // namespace

at::Tensor attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& key_mask, Direction direction, double dropout) {
  check_inputs("attention_reference", q, k, v, key_mask);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(q))
    return attention_reference(detail::widen(q), detail::widen(k), detail::widen(v), key_mask,
                               direction, dropout)
        .to(at::kBFloat16);
  TORCH_CHECK(dropout >= 0 && dropout < 1, "attention_reference: dropout must be in [0, 1), got ",
              dropout);
  const auto drop = [&](const at::Tensor& probs) {
    return dropout > 0 ? at::dropout(probs, dropout, true) : probs;
  };
  const int64_t B = q.size(0), L = q.size(2), dh = q.size(3);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
  at::Tensor allowed;  // [B or 1, 1, L, L]: query i may see key j
  if (direction == Direction::causal)
    allowed = at::ones({L, L}, q.options().dtype(at::kBool)).tril().view({1, 1, L, L});
  if (key_mask.defined()) {
    const at::Tensor keys = key_mask.view({B, 1, 1, L});
    allowed = allowed.defined() ? allowed.logical_and(keys) : keys;
  }
  if (!allowed.defined()) return at::matmul(drop(at::softmax(scores, -1)), v);
  // A large finite fill rather than -inf, so a row without keys softmaxes to a finite uniform
  // row (no NaN in either direction); multiplying by "has a key" then makes it 0.
  at::Tensor probs = at::softmax(scores.masked_fill(allowed.logical_not(), -1e30), -1);
  const at::Tensor has_key = allowed.any(-1, true).to(q.scalar_type());  // [B or 1, 1, L, 1]
  return at::matmul(drop(probs), v) * has_key;
}

at::Tensor attention_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& key_mask, Direction direction) {
  static const auto op = detail::find_op<AttentionSignature>("seqmix::attention");
  return op.call(q, k, v, detail::optional(key_mask), to_string(direction));
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& key_mask, Direction direction, Backend backend) {
  if (backend == Backend::kernel) return attention_kernel(q, k, v, key_mask, direction);
  static const auto op =
      detail::find_op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, c10::string_view, double)>(
          "seqmix::attention_reference");
  return op.call(q, k, v, detail::optional(key_mask), to_string(direction), 0.0);
}

// The schemas: attention is implemented per dispatch key above; _attention_forward also
// returns the log-sum-exp its backward (_attention_backward) reads; the reference is ATen
// code (CompositeImplicitAutograd).
TORCH_LIBRARY_FRAGMENT(seqmix, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, Tensor? key_mask=None, "
      "str direction=\"causal\") -> Tensor",
      tags);
  m.def(
      "attention_reference(Tensor q, Tensor k, Tensor v, Tensor? key_mask=None, "
      "str direction=\"causal\", float dropout=0.0) -> Tensor",
      tags);
  m.def(
      "_attention_forward(Tensor q, Tensor k, Tensor v, Tensor? key_mask, str direction) -> "
      "(Tensor, Tensor)",
      tags);
  m.def(
      "_attention_backward(Tensor grad, Tensor q, Tensor k, Tensor v, Tensor? key_mask, "
      "Tensor out, Tensor lse, str direction) -> (Tensor, Tensor, Tensor)",
      tags);
  m.impl("attention_reference", c10::DispatchKey::CompositeImplicitAutograd, &reference_op);
}

TORCH_LIBRARY_IMPL(seqmix, CPU, m) {
  m.impl("attention", &attention_cpu);
  m.impl("_attention_forward", &attention_forward_cpu);
  m.impl("_attention_backward", &attention_backward_cpu);
}

TORCH_LIBRARY_IMPL(seqmix, Meta, m) {
  m.impl("attention", &attention_meta);
  m.impl("_attention_forward", &attention_forward_meta);
  m.impl("_attention_backward", &attention_backward_meta);
}

TORCH_LIBRARY_IMPL(seqmix, Autograd, m) { m.impl("attention", &attention_autograd); }

TORCH_LIBRARY_IMPL(seqmix, AutocastCPU, m) { m.impl("attention", &attention_autocast); }

// Below autograd (inference mode): the same SDPA call.
TORCH_LIBRARY_IMPL(seqmix, CUDA, m) { m.impl("attention", &attention_sdpa); }

TORCH_LIBRARY_IMPL(seqmix, AutocastCUDA, m) { m.impl("attention", &attention_autocast); }

}  // namespace seqmix::ops
