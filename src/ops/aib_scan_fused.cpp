// torch::autograd::Function around the fused AIB scan kernels (src/ops/cpu/).
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "aib_scan_internal.h"
#include "double_backward.h"
#include "cpu/aib_scan_kernel.h"
#include "low_precision.h"

namespace seqmix::ops {

namespace {

int64_t levels_for(int64_t L) { return L > 1 ? aib_num_levels(L) : 0; }

// Kernel parameters for a and v of dtype T, or of bfloat16 with T = float (lw is float then).
template <typename T>
cpu::AIBScanParams<T> make_params(const at::Tensor& a, const at::Tensor& v, const at::Tensor& lw,
                                  const at::Tensor& mask, bool bidirectional) {
  cpu::AIBScanParams<T> p;
  if (detail::is_bf16(a)) {
    p.bf16.a = detail::bf16_bits(a);
    p.bf16.v = detail::bf16_bits(v);
  } else {
    p.a = a.data_ptr<T>();
    p.v = v.data_ptr<T>();
  }
  p.lw = lw.data_ptr<T>();
  p.mask = mask.numel() > 0 ? reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>()) : nullptr;
  p.B = a.size(0);
  p.L = a.size(1);
  p.D = a.size(2);
  p.K = levels_for(p.L);
  p.bidirectional = bidirectional;
  return p;
}

// Splits the (batch, channel block) work items over LibTorch's threads; each thread gets its
// own scratch buffer (allocated through ATen, so memory accounting sees it).
template <typename T, typename Kernel>
void run_items(const cpu::AIBScanParams<T>& p, bool backward, Kernel kernel) {
  constexpr int64_t lanes = cpu::aib_lanes<T>();
  const int64_t items = cpu::aib_work_items(p.B, p.D, p.bidirectional, lanes);
  const int64_t bytes = cpu::aib_scratch_bytes(p.L, p.K, lanes, sizeof(T), backward);
  at::parallel_for(0, items, 1, [&](int64_t begin, int64_t end) {
    // Over-allocate by one vector so the buffer can start on a 64-byte boundary.
    at::Tensor scratch = at::empty({bytes + 64}, at::kByte);
    auto addr = reinterpret_cast<uintptr_t>(scratch.data_ptr());
    kernel(p, begin, end, reinterpret_cast<void*>((addr + 63) & ~uintptr_t{63}));
  });
}

at::Tensor forward_impl(const at::Tensor& a, const at::Tensor& v, const at::Tensor& lw,
                        const at::Tensor& mask, bool bidirectional) {
  at::Tensor o = at::empty_like(a);
  if (a.numel() == 0) return o;
  if (detail::is_bf16(a)) {
    auto p = make_params<float>(a, v, lw, mask, bidirectional);
    p.bf16.o = detail::bf16_bits(o);
    run_items<float>(p, false, cpu::aib_scan_forward<float>);
    return o;
  }
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "aib_scan_fused_forward", [&] {
    auto p = make_params<scalar_t>(a, v, lw, mask, bidirectional);
    p.o = o.data_ptr<scalar_t>();
    run_items<scalar_t>(p, false, cpu::aib_scan_forward<scalar_t>);
  });
  return o;
}

class AIBScanFunction : public torch::autograd::Function<AIBScanFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a,
                            const at::Tensor& v, const at::Tensor& lw, const at::Tensor& mask,
                            bool bidirectional) {
    ctx->save_for_backward({a, v, lw, mask});
    ctx->saved_data["bidirectional"] = bidirectional;
    return forward_impl(a, v, lw, mask, bidirectional);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &v = saved[1], &lw = saved[2], &mask = saved[3];
    const bool bidirectional = ctx->saved_data["bidirectional"].toBool();
    if (detail::differentiable_backward()) {
      // log W enters the kernel as the reference's `exp` weights: W = exp(lw).
      auto g = detail::reference_backward(
          [&](const std::vector<at::Tensor>& in) {
            return aib_scan_reference(in[0], in[1], in[2], mask.numel() ? mask : at::Tensor(),
                                      bidirectional ? Direction::bidirectional : Direction::causal,
                                      AIBWeights::exp);
          },
          {a, v, lw}, grads[0]);
      return {g[0], g[1], g[2], at::Tensor(), at::Tensor()};
    }
    const at::Tensor go = grads[0].to(a.scalar_type()).contiguous();
    at::Tensor ga = at::empty_like(a), gv = at::empty_like(v), glw = at::zeros_like(lw);
    const int64_t K = levels_for(a.size(1));
    if (a.numel() > 0) {
      at::Tensor partial = at::zeros({a.size(0), K, a.size(2)}, lw.options().dtype(at::kDouble));
      if (detail::is_bf16(a)) {
        auto p = make_params<float>(a, v, lw, mask, bidirectional);
        p.bf16.grad_o = detail::bf16_bits(go);
        p.bf16.grad_a = detail::bf16_bits(ga);
        p.bf16.grad_v = detail::bf16_bits(gv);
        p.grad_lw = partial.data_ptr<double>();
        run_items<float>(p, true, cpu::aib_scan_backward<float>);
      } else {
        AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "aib_scan_fused_backward", [&] {
          auto p = make_params<scalar_t>(a, v, lw, mask, bidirectional);
          p.grad_o = go.data_ptr<scalar_t>();
          p.grad_a = ga.data_ptr<scalar_t>();
          p.grad_v = gv.data_ptr<scalar_t>();
          p.grad_lw = partial.data_ptr<double>();
          run_items<scalar_t>(p, true, cpu::aib_scan_backward<scalar_t>);
        });
      }
      if (K > 0) glw.narrow(0, 0, K).copy_(partial.sum(0));
    } else {
      ga.zero_();
      gv.zero_();
    }
    return {ga, gv, glw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor aib_scan_fused(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                          const at::Tensor& mask, Direction direction, AIBWeights weights) {
  aib_check_inputs("aib_scan_fused", a, v, w, mask, direction, weights);
  const detail::AutocastOff autocast_off;
  // The kernel's exponent arithmetic holds exp(A) for |A log2 e| below 2^20 (kMaxT in
  // cpu/vec_math_impl.h: |A| < 726,817) and finite A. Beyond that -- a diverged model, a
  // crafted input -- it would clamp A and answer wrongly, silently; aib_scan_stable, which
  // carries a maximum per position, gives the exact answer (and NaN for NaN, as it should).
  // The check is one read of A: 2.5 ms of the op's 33 ms forward at B = 4, L = 4096,
  // D = 512 in float32 on 2 threads (machine D), a cost paid for never answering wrongly.
  if (a.numel() > 0) {
    constexpr double kKernelRange = 524288;  // 2^19: a margin below the clamp
    const auto [lo, hi] = at::aminmax(a);
    if (!(lo.item<double>() > -kKernelRange && hi.item<double>() < kKernelRange))
      return aib_scan_stable(a, v, w, mask, direction, weights);
  }
  // The kernel takes log W; how W is parameterised stays in ATen, where autograd handles it.
  // bfloat16 A and V go into the kernel as they are (read and written in bfloat16, computed
  // in float32); log W is float32 then.
  const at::Tensor w32 = detail::widen(w);
  at::Tensor lw;
  switch (weights) {
    case AIBWeights::prefix_exp:
      lw = at::cumsum(w32, 0);
      break;
    case AIBWeights::exp:
      lw = w32;
      break;
    case AIBWeights::ones:
      lw = at::zeros({std::max<int64_t>(1, levels_for(a.size(1))), a.size(2)},
                     a.options().dtype(detail::is_bf16(a) ? at::kFloat : a.scalar_type()));
      break;
  }
  return AIBScanFunction::apply(a.contiguous(), v.contiguous(), lw.contiguous(),
                                // autograd::Function inputs must be defined: "no mask" is an
                                // empty tensor.
                                mask.defined() ? mask.contiguous() : at::empty({0}, at::kBool),
                                direction == Direction::bidirectional);
}

}  // namespace seqmix::ops
