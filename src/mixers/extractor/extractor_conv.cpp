#include "seqmix/ops/extractor_conv.h"

#include <fmt/format.h>
#include <torch/fft.h>
#include <torch/library.h>

#include <stdexcept>

#include "ops/dispatch.h"
#include "ops/low_precision.h"

namespace seqmix::ops {

namespace {

// Concrete sizes (dispatch.h): the FFT length and the reference's loop depend on t.
using detail::concrete;

void check_inputs(const char* op, const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK_VALUE(x.defined() && x.dim() == 3, op, ": x must be [B, t, D], got ",
                    x.defined() ? x.dim() : 0, " dims");
  TORCH_CHECK_VALUE(w.defined() && w.dim() == 3 && concrete(w.sym_size(1)) == concrete(w.sym_size(2)),
                    op, ": w must be [l, D, D]");
  TORCH_CHECK_VALUE(concrete(w.sym_size(1)) == concrete(x.sym_size(2)), op, ": x has D = ",
                    x.sym_size(2), " channels but w is ", w.sym_sizes());
  TORCH_CHECK_VALUE(concrete(x.sym_size(1)) <= concrete(w.sym_size(0)), op,
                    ": sequence length t = ", x.sym_size(1),
                    " exceeds the number of lag matrices l = ", w.sym_size(0),
                    " (the Extractor's context window)");
  TORCH_CHECK_VALUE(detail::activation_dtype_ok(x.scalar_type()) &&
                        detail::param_dtype_fits(w.scalar_type(), x.scalar_type()),
                    op,
                    ": x must be float32, float64 or bfloat16 and w of the same dtype (or "
                    "float32 with bfloat16 x); got ",
                    x.scalar_type(), " and ", w.scalar_type());
  TORCH_CHECK_VALUE(w.device() == x.device(), op, ": w is on ", w.device(), " but x on ",
                    x.device());
}

}  // namespace

at::Tensor extractor_conv_reference(const at::Tensor& x, const at::Tensor& w) {
  check_inputs("extractor_conv_reference", x, w);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(x))
    return extractor_conv_reference(detail::widen(x), detail::widen(w)).to(at::kBFloat16);
  const int64_t t = concrete(x.sym_size(1));
  at::Tensor ext = at::zeros_like(x);
  for (int64_t k = 0; k < t; ++k) {
    // Positions k .. t-1 receive x[i - k] W[k].
    at::Tensor term = at::matmul(x.narrow(1, 0, t - k), w[k]);
    ext = ext + at::constant_pad_nd(term, {0, 0, k, 0});
  }
  return ext;
}

at::Tensor extractor_conv_kernel(const at::Tensor& x, const at::Tensor& w) {
  check_inputs("extractor_conv_kernel", x, w);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(x))
    return extractor_conv_kernel(detail::widen(x), detail::widen(w)).to(at::kBFloat16);
  const int64_t t = concrete(x.sym_size(1));
  if (t == 0) return at::zeros_like(x);
  // An empty batch: the FFT libraries refuse a transform of no signals (MKL: "Inconsistent
  // configuration parameters"); the empty result, still a function of w for autograd.
  if (x.sym_numel() == 0) return at::matmul(x, w[0]);
  // Linear (not circular) convolution needs n >= 2t - 1; a power of two keeps the FFT fast.
  int64_t n = 1;
  while (n < 2 * t - 1) n <<= 1;
  // Every transform runs over the last, contiguous dimension: for an inner dimension the
  // CPU FFT's output strides differ from its fake (meta) kernel's, which torch.compile's
  // generated code asserts on.
  const at::Tensor xf = torch::fft::rfft(x.transpose(1, 2).contiguous(), n, -1);  // [B, D, F]
  const at::Tensor wf =
      torch::fft::rfft(w.narrow(0, 0, t).permute({1, 2, 0}).contiguous(), n, -1);  // [D, D, F]
  const at::Tensor yf = at::matmul(xf.permute({2, 0, 1}), wf.permute({2, 0, 1}));  // [F, B, D]
  return torch::fft::irfft(yf.permute({1, 2, 0}).contiguous(), n, -1)
      .narrow(-1, 0, t)
      .transpose(1, 2)
      .contiguous();
}

at::Tensor extractor_conv(const at::Tensor& x, const at::Tensor& w, Backend backend) {
  static const auto kernel = detail::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(
      "seqmix::extractor_conv");
  static const auto reference =
      detail::find_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(
          "seqmix::extractor_conv_reference");
  return backend == Backend::kernel ? kernel.call(x, w) : reference.call(x, w);
}

at::Tensor extractor_conv_last(const at::Tensor& history, const at::Tensor& w) {
  check_inputs("extractor_conv_last", history, w);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(history))
    return extractor_conv_last(detail::widen(history), detail::widen(w)).to(at::kBFloat16);
  const int64_t t = history.size(1), D = history.size(2);
  // sum_k x[t-1-k] W[k]: flip the history so lag k is row k, then one [B, t D] x [t D, D].
  const at::Tensor lags = history.flip({1}).reshape({history.size(0), t * D});
  return at::matmul(lags, w.narrow(0, 0, t).reshape({t * D, D}));
}

}  // namespace seqmix::ops

namespace seqmix::ops {

// The schemas. The kernel is ATen's FFT (pocketfft on the CPU, cuFFT on CUDA) around one
// batched matrix product per frequency, so both ops are CompositeImplicitAutograd: autograd
// differentiates the FFT exactly, fake tensors and every device come with ATen's ops, and
// torch.compile sees the FFT.
TORCH_LIBRARY_FRAGMENT(seqmix, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def("extractor_conv(Tensor x, Tensor w) -> Tensor", tags);
  m.def("extractor_conv_reference(Tensor x, Tensor w) -> Tensor", tags);
  m.impl("extractor_conv", c10::DispatchKey::CompositeImplicitAutograd, &extractor_conv_kernel);
  m.impl("extractor_conv_reference", c10::DispatchKey::CompositeImplicitAutograd,
         &extractor_conv_reference);
}

}  // namespace seqmix::ops
