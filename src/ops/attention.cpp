// Softmax attention: the literal ATen reference and the fused kernel as an autograd Function
// (src/ops/cpu/attention_kernel_impl.h).
#include "seqmix/ops/attention.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <cmath>
#include <stdexcept>
#include <limits>
#include <memory>

#include "check_mask.h"
#include "double_backward.h"
#include "low_precision.h"
#include "cpu/attention_kernel.h"

namespace seqmix::ops {

namespace {

void check_inputs(const char* fn, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& key_mask) {
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"q", q},
                                {"k", k},
                                {"v", v}}) {
    TORCH_CHECK(t.defined() && t.dim() == 4, fn, ": ", name, " must be [B, H, L, d_head], got ",
                t.defined() ? t.sizes() : at::IntArrayRef{});
    TORCH_CHECK(t.device().is_cpu(), fn, ": ", name, " must be a CPU tensor, got ", t.device());
    TORCH_CHECK(detail::activation_dtype_ok(t.scalar_type()), fn, ": ", name,
                " must be float32, float64 or bfloat16, got ", t.scalar_type());
    TORCH_CHECK(t.sizes() == q.sizes(), fn, ": ", name, " is ", t.sizes(), " but q is ",
                q.sizes());
    TORCH_CHECK(t.scalar_type() == q.scalar_type(), fn, ": ", name, " dtype ", t.scalar_type(),
                " differs from q dtype ", q.scalar_type());
  }
  check_padding_mask(fn, key_mask, q.size(0), q.size(2));
  TORCH_CHECK(!key_mask.defined() || key_mask.device().is_cpu(), fn,
              ": key_mask must be a CPU tensor, got ", key_mask.device());
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

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  // q, k, v: float32, float64 or bfloat16. With bfloat16 the kernel computes in float32 and
  // its outputs are rounded once; the float32 output is what backward reads.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_mask,
                            bool causal) {
    const auto arith = detail::is_bf16(q) ? at::kFloat : q.scalar_type();
    // Every row is written (0 for a row without keys).
    at::Tensor o = at::empty(q.sizes(), q.options().dtype(arith));
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(arith));
    if (q.numel() > 0) {
      dispatch_arithmetic(q, [&](auto zero) {
        using T = decltype(zero);
        auto p = make_params<T>(q, k, v, key_mask, causal);
        p.o = o.data_ptr<T>();
        p.lse = lse.data_ptr<T>();
        at::parallel_for(0, p.BH, 1, [&](int64_t begin, int64_t end) {
          // Uninitialised: the kernel zeroes its scratch itself.
          std::unique_ptr<T[]> scratch(new T[cpu::attention_scratch_elems(p, false)]);
          cpu::attention_forward<T>(p, begin, end, scratch.get());
        });
      });
    }
    // NaN in, NaN out, as the reference: a row whose scores are not finite (a non-finite
    // query, or finite q and k whose product overflows) has no log-sum-exp, and the kernel's
    // running maximum would take it for a row without keys (a row of 0).
    if (q.numel() > 0) {
      const at::Tensor bad = at::isfinite(lse).logical_not();  // [B, H, L]
      if (bad.any().item<bool>()) {
        at::Tensor rows = bad;
        if (key_mask.dim() == 2) {  // only rows that see a key: the others are 0 there too
          const at::Tensor sees = causal ? key_mask.to(at::kLong).cumsum(-1).gt(0)
                                         : key_mask.any(-1, true).expand_as(key_mask);
          rows = rows.logical_and(sees.unsqueeze(1));
        }
        o.masked_fill_(rows.unsqueeze(-1), std::numeric_limits<double>::quiet_NaN());
      }
    }
    ctx->save_for_backward({q, k, v, key_mask, o, lse});
    ctx->saved_data["causal"] = causal;
    return o.to(q.scalar_type());
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &key_mask = saved[3],
                     &o = saved[4], &lse = saved[5];
    if (detail::differentiable_backward()) {
      const bool causal = ctx->saved_data["causal"].toBool();
      auto g = detail::reference_backward(
          [&](const std::vector<at::Tensor>& in) {
            return attention_reference(in[0], in[1], in[2],
                                       key_mask.dim() == 2 ? key_mask : at::Tensor(),
                                       causal ? Direction::causal : Direction::bidirectional);
          },
          {q, k, v}, grads[0]);
      return {g[0], g[1], g[2], at::Tensor(), at::Tensor()};
    }
    const at::Tensor go = grads[0].to(q.scalar_type()).contiguous();
    at::Tensor gq = at::empty_like(o), gk = at::empty_like(o), gv = at::empty_like(o);
    if (q.numel() > 0) {
      dispatch_arithmetic(q, [&](auto zero) {
        using T = decltype(zero);
        auto p = make_params<T>(q, k, v, key_mask, ctx->saved_data["causal"].toBool());
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
    return {gq.to(out), gk.to(out), gv.to(out), at::Tensor(), at::Tensor()};
  }
};

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
  check_inputs("attention_kernel", q, k, v, key_mask);
  const detail::AutocastOff autocast_off;
  return AttentionFunction::apply(
      q.contiguous(), k.contiguous(), v.contiguous(),
      key_mask.defined() ? key_mask.contiguous() : at::empty({0}, at::kBool),
      direction == Direction::causal);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& key_mask, Direction direction, Backend backend) {
  return backend == Backend::kernel ? attention_kernel(q, k, v, key_mask, direction)
                                    : attention_reference(q, k, v, key_mask, direction);
}

}  // namespace seqmix::ops
