// seqmix::aib_scan in the dispatcher: the fused CPU kernels (src/mixers/aib/cpu/) under the CPU key,
// their hand-written backward (seqmix::_aib_scan_backward) under Autograd, shapes alone under
// Meta, and autocast switched off inside the op under AutocastCPU.
#include <ATen/Parallel.h>

#include <atomic>
#include <torch/autograd.h>
#include <torch/library.h>

#include "aib_scan_internal.h"
#include "ops/dispatch.h"
#include "ops/double_backward.h"
#include "cpu/aib_scan_kernel.h"
#include "ops/low_precision.h"

namespace seqmix::ops {

at::Tensor aib_log_weights(const at::Tensor& w, const at::Tensor& a, AIBWeights weights) {
  switch (weights) {
    case AIBWeights::prefix_exp:
      return at::cumsum(detail::widen(w), 0).contiguous();
    case AIBWeights::exp:
      return detail::widen(w).contiguous();
    case AIBWeights::ones:
      break;
  }
  const int64_t K = a.size(1) > 1 ? aib_num_levels(a.size(1)) : 0;
  return at::zeros({std::max<int64_t>(1, K), a.size(2)},
                   a.options().dtype(detail::is_bf16(a) ? at::kFloat : a.scalar_type()));
}

// The gradient of w from that of log W: the adjoint of cumsum is the reversed cumsum.
at::Tensor aib_grad_w_from_log(const at::Tensor& glw, const at::Tensor& w, AIBWeights weights) {
  if (!w.defined()) return at::empty({0}, glw.options());
  switch (weights) {
    case AIBWeights::prefix_exp:
      return glw.flip({0}).cumsum(0).flip({0}).to(w.scalar_type());
    case AIBWeights::exp:
      return glw.to(w.scalar_type());
    case AIBWeights::ones:
      break;
  }
  return at::zeros_like(w);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> aib_scan_stable_backward(
    const at::Tensor& grad, const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
    const at::Tensor& mask, Direction direction, AIBWeights weights) {
  c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
  local.excluded_ = local.excluded_ - c10::autograd_dispatch_keyset_with_ADInplaceOrView;
  const c10::impl::ForceDispatchKeyGuard with_autograd(local);
  const at::AutoGradMode grad_mode(true);
  const at::Tensor ad = a.detach().requires_grad_(), vd = v.detach().requires_grad_();
  const at::Tensor wd = w.defined() ? w.detach().requires_grad_() : w;
  std::vector<at::Tensor> wrt{ad, vd};
  if (wd.defined()) wrt.push_back(wd);
  const at::Tensor o = aib_scan_stable(ad, vd, wd, mask, direction, weights);
  const auto g = torch::autograd::grad({o}, wrt, {grad.to(o.scalar_type())},
                                       /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
  auto or_zeros = [](const at::Tensor& gi, const at::Tensor& like) {
    return gi.defined() ? gi : at::zeros_like(like);
  };
  return {or_zeros(g[0], a), or_zeros(g[1], v),
          wd.defined() ? or_zeros(g[2], w) : at::empty({0}, a.options())};
}

namespace {
std::atomic<AIBFallbackReader> g_cuda_fallbacks{nullptr};
std::atomic<int64_t> g_stable_fallbacks{0};
}  // namespace

void aib_register_cuda_fallback_reader(AIBFallbackReader reader) { g_cuda_fallbacks.store(reader); }

void aib_count_stable_fallback() { g_stable_fallbacks.fetch_add(1, std::memory_order_relaxed); }

void aib_note_fallbacks(int64_t count) {
  if (count <= 0) return;
  TORCH_WARN_ONCE(
      "seqmix.aib_scan: the fused kernel left its fast path for the exact fallback (",
      count, " so far; seqmix.ops.aib_scan_fallbacks() counts them). The result is exact but "
      "several times slower. Causes: A spanning ~70 nats or more within a few hundred "
      "positions, one distance level's weight beyond about e^+-50, |V| >= 2^64, or "
      "NaN/infinity in the inputs.");
}

int64_t aib_scan_fallbacks() {
  int64_t n = cpu::aib_fast_path_fallbacks() + g_stable_fallbacks.load();
  if (const AIBFallbackReader cuda = g_cuda_fallbacks.load()) n += cuda();
  aib_note_fallbacks(n);
  return n;
}

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

// The kernel's exponent arithmetic holds exp(A) for |A log2 e| below 2^20 (kMaxT in
// cpu/vec_math_impl.h: |A| < 726,817) and finite A. Beyond that -- a diverged model, a crafted
// input -- it would clamp A and answer wrongly, silently; aib_scan_stable, which carries a
// maximum per position, gives the exact answer (and NaN for NaN, as it should). The check is
// one read of A: 2.5 ms of the op's 33 ms forward at B = 4, L = 4096, D = 512 in float32 on 2
// threads (machine D), a cost paid for never answering wrongly.
bool within_kernel_range(const at::Tensor& a) {
  if (a.numel() == 0) return true;
  constexpr double kKernelRange = 524288;  // 2^19: a margin below the clamp
  const auto [lo, hi] = at::aminmax(a);
  return lo.item<double>() > -kKernelRange && hi.item<double>() < kKernelRange;
}

AIBWeights weights_arg(c10::string_view s) { return aib_weights_arg("aib_scan", s); }

int64_t aib_scan_fallbacks_cpu() {
  return cpu::aib_fast_path_fallbacks() + g_stable_fallbacks.load();
}

// Warns (once per process) when the CPU kernels fell back during the watched call.
class FallbackWatch {
 public:
  FallbackWatch() : before_(cpu::aib_fast_path_fallbacks()) {}
  ~FallbackWatch() {
    if (cpu::aib_fast_path_fallbacks() != before_) aib_note_fallbacks(aib_scan_fallbacks_cpu());
  }
  FallbackWatch(const FallbackWatch&) = delete;
  FallbackWatch& operator=(const FallbackWatch&) = delete;

 private:
  int64_t before_;
};

// The kernel's mask argument: none is an empty tensor.
at::Tensor kernel_mask(const at::Tensor& mask) {
  return mask.defined() ? mask.contiguous() : at::empty({0}, at::kBool);
}

// ---- CPU ----

at::Tensor aib_scan_cpu(const at::Tensor& a_in, const at::Tensor& v_in,
                        const std::optional<at::Tensor>& w_opt,
                        const std::optional<at::Tensor>& mask_opt, c10::string_view direction_s,
                        c10::string_view weights_s) {
  const Direction direction = detail::direction_arg("aib_scan", direction_s);
  const AIBWeights weights = weights_arg(weights_s);
  const at::Tensor w = detail::or_undefined(w_opt), mask = detail::or_undefined(mask_opt);
  aib_check_inputs("aib_scan", a_in, v_in, w, mask, direction, weights);
  if (!within_kernel_range(a_in)) {
    aib_count_stable_fallback();
    aib_note_fallbacks(aib_scan_fallbacks_cpu());
    return aib_scan_stable(a_in, v_in, w, mask, direction, weights);
  }
  const FallbackWatch watch;
  const at::Tensor a = a_in.contiguous(), v = v_in.contiguous();
  const at::Tensor lw = aib_log_weights(w, a, weights), m = kernel_mask(mask);
  const bool bidirectional = direction == Direction::bidirectional;
  at::Tensor o = at::empty_like(a, at::MemoryFormat::Contiguous);
  if (a.numel() == 0) return o;
  // bfloat16 A and V go into the kernel as they are (read and written in bfloat16, computed
  // in float32).
  if (detail::is_bf16(a)) {
    auto p = make_params<float>(a, v, lw, m, bidirectional);
    p.bf16.o = detail::bf16_bits(o);
    run_items<float>(p, false, cpu::aib_scan_forward<float>);
    return o;
  }
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "aib_scan_forward", [&] {
    auto p = make_params<scalar_t>(a, v, lw, m, bidirectional);
    p.o = o.data_ptr<scalar_t>();
    run_items<scalar_t>(p, false, cpu::aib_scan_forward<scalar_t>);
  });
  return o;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> aib_scan_backward_cpu(
    const at::Tensor& grad_in, const at::Tensor& a_in, const at::Tensor& v_in,
    const std::optional<at::Tensor>& w_opt, const std::optional<at::Tensor>& mask_opt,
    c10::string_view direction_s, c10::string_view weights_s) {
  const Direction direction = detail::direction_arg("_aib_scan_backward", direction_s);
  const AIBWeights weights = weights_arg(weights_s);
  const at::Tensor w = detail::or_undefined(w_opt), mask = detail::or_undefined(mask_opt);
  aib_check_inputs("_aib_scan_backward", a_in, v_in, w, mask, direction, weights);
  if (!within_kernel_range(a_in)) {
    aib_count_stable_fallback();
    aib_note_fallbacks(aib_scan_fallbacks_cpu());
    return aib_scan_stable_backward(grad_in, a_in, v_in, w, mask, direction, weights);
  }
  const FallbackWatch watch;
  const at::Tensor a = a_in.contiguous(), v = v_in.contiguous();
  const at::Tensor lw = aib_log_weights(w, a, weights), m = kernel_mask(mask);
  const bool bidirectional = direction == Direction::bidirectional;
  const at::Tensor go = grad_in.to(a.scalar_type()).contiguous();
  at::Tensor ga = at::empty_like(a), gv = at::empty_like(v), glw = at::zeros_like(lw);
  const int64_t K = levels_for(a.size(1));
  if (a.numel() > 0) {
    at::Tensor partial = at::zeros({a.size(0), K, a.size(2)}, lw.options().dtype(at::kDouble));
    if (detail::is_bf16(a)) {
      auto p = make_params<float>(a, v, lw, m, bidirectional);
      p.bf16.grad_o = detail::bf16_bits(go);
      p.bf16.grad_a = detail::bf16_bits(ga);
      p.bf16.grad_v = detail::bf16_bits(gv);
      p.grad_lw = partial.data_ptr<double>();
      run_items<float>(p, true, cpu::aib_scan_backward<float>);
    } else {
      AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "aib_scan_backward", [&] {
        auto p = make_params<scalar_t>(a, v, lw, m, bidirectional);
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
  return {ga, gv, aib_grad_w_from_log(glw, w, weights)};
}

// ---- Meta: shapes and dtypes only (fake tensors, torch.compile, torch.export) ----

at::Tensor aib_scan_meta(const at::Tensor& a, const at::Tensor& v,
                         const std::optional<at::Tensor>& w,
                         const std::optional<at::Tensor>& mask, c10::string_view direction,
                         c10::string_view weights) {
  aib_check_inputs("aib_scan", a, v, detail::or_undefined(w), detail::or_undefined(mask),
                   detail::direction_arg("aib_scan", direction), weights_arg(weights));
  return at::empty_like(a, at::MemoryFormat::Contiguous);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> aib_scan_backward_meta(
    const at::Tensor& grad, const at::Tensor& a, const at::Tensor& v,
    const std::optional<at::Tensor>& w, const std::optional<at::Tensor>& mask,
    c10::string_view direction, c10::string_view weights) {
  aib_check_inputs("_aib_scan_backward", a, v, detail::or_undefined(w),
                   detail::or_undefined(mask),
                   detail::direction_arg("_aib_scan_backward", direction), weights_arg(weights));
  (void)grad;
  return {at::empty_like(a, at::MemoryFormat::Contiguous),
          at::empty_like(v, at::MemoryFormat::Contiguous),
          w.has_value() ? at::empty_like(*w, at::MemoryFormat::Contiguous)
                        : at::empty({0}, a.options())};
}

// ---- Autograd ----

using ScanSignature = at::Tensor(const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&,
                                 const std::optional<at::Tensor>&, c10::string_view,
                                 c10::string_view);
using ScanBackwardSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, c10::string_view, c10::string_view);

class AIBScanFunction : public torch::autograd::Function<AIBScanFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a,
                            const at::Tensor& v, const std::optional<at::Tensor>& w,
                            const std::optional<at::Tensor>& mask, const std::string& direction,
                            const std::string& weights) {
    ctx->save_for_backward({a, v, detail::or_undefined(w), detail::or_undefined(mask)});
    ctx->saved_data["direction"] = direction;
    ctx->saved_data["weights"] = weights;
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op = detail::find_op<ScanSignature>("seqmix::aib_scan");
    return op.call(a, v, w, mask, direction, weights);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &v = saved[1], &w = saved[2], &mask = saved[3];
    const std::string direction = ctx->saved_data["direction"].toStringRef();
    const std::string weights = ctx->saved_data["weights"].toStringRef();
    if (detail::differentiable_backward()) {
      auto g = detail::reference_backward(
          [&](const std::vector<at::Tensor>& in) {
            return aib_scan_reference(in[0], in[1], in[2], mask,
                                      detail::direction_arg("aib_scan", direction),
                                      weights_arg(weights));
          },
          {a, v, w}, grads[0]);
      return {g[0], g[1], g[2], at::Tensor(), at::Tensor(), at::Tensor()};
    }
    static const auto op = detail::find_op<ScanBackwardSignature>("seqmix::_aib_scan_backward");
    auto [ga, gv, gw] =
        op.call(grads[0], a, v, detail::optional(w), detail::optional(mask), direction, weights);
    return {ga, gv, w.defined() ? gw : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor aib_scan_autograd(const at::Tensor& a, const at::Tensor& v,
                             const std::optional<at::Tensor>& w,
                             const std::optional<at::Tensor>& mask, c10::string_view direction,
                             c10::string_view weights) {
  return AIBScanFunction::apply(a, v, w, mask, std::string(direction), std::string(weights));
}

// ---- AutocastCPU and AutocastCUDA: the op computes in the dtypes its contract names (common.h) ----

at::Tensor aib_scan_autocast(const at::Tensor& a, const at::Tensor& v,
                             const std::optional<at::Tensor>& w,
                             const std::optional<at::Tensor>& mask, c10::string_view direction,
                             c10::string_view weights) {
  const detail::AutocastOff autocast_off;
  static const auto op = detail::find_op<ScanSignature>("seqmix::aib_scan");
  return op.call(a, v, w, mask, direction, weights);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(seqmix, m) {
  // No tensor argument, so one kernel serves every device (the dispatcher's catch-all).
  m.def("aib_scan_fallbacks() -> int", &aib_scan_fallbacks);
}

TORCH_LIBRARY_IMPL(seqmix, CPU, m) {
  m.impl("aib_scan", &aib_scan_cpu);
  m.impl("_aib_scan_backward", &aib_scan_backward_cpu);
}

TORCH_LIBRARY_IMPL(seqmix, Meta, m) {
  m.impl("aib_scan", &aib_scan_meta);
  m.impl("_aib_scan_backward", &aib_scan_backward_meta);
}

TORCH_LIBRARY_IMPL(seqmix, Autograd, m) { m.impl("aib_scan", &aib_scan_autograd); }

TORCH_LIBRARY_IMPL(seqmix, AutocastCPU, m) { m.impl("aib_scan", &aib_scan_autocast); }

TORCH_LIBRARY_IMPL(seqmix, AutocastCUDA, m) { m.impl("aib_scan", &aib_scan_autocast); }

at::Tensor aib_scan_kernel(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                           const at::Tensor& mask, Direction direction, AIBWeights weights) {
  static const auto op = detail::find_op<ScanSignature>("seqmix::aib_scan");
  return op.call(a, v, detail::optional(w), detail::optional(mask), to_string(direction),
                 to_string(weights));
}

}  // namespace seqmix::ops
