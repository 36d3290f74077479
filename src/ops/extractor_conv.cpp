#include "seqmix/ops/extractor_conv.h"

#include <fmt/format.h>
#include <torch/fft.h>

#include <stdexcept>

#include "low_precision.h"

namespace seqmix::ops {

namespace {

void check_inputs(const char* op, const at::Tensor& x, const at::Tensor& w) {
  if (!x.defined() || x.dim() != 3)
    throw std::invalid_argument(fmt::format("{}: x must be [B, t, D], got {} dims", op,
                                            x.defined() ? x.dim() : 0));
  if (!w.defined() || w.dim() != 3 || w.size(1) != w.size(2))
    throw std::invalid_argument(fmt::format("{}: w must be [l, D, D]", op));
  if (w.size(1) != x.size(2))
    throw std::invalid_argument(fmt::format("{}: x has D = {} channels but w is [{}, {}, {}]", op,
                                            x.size(2), w.size(0), w.size(1), w.size(2)));
  if (x.size(1) > w.size(0))
    throw std::invalid_argument(
        fmt::format("{}: sequence length t = {} exceeds the number of lag matrices l = {} "
                    "(the Extractor's context window)",
                    op, x.size(1), w.size(0)));
  if (!detail::activation_dtype_ok(x.scalar_type()) ||
      !detail::param_dtype_fits(w.scalar_type(), x.scalar_type()))
    throw std::invalid_argument(fmt::format(
        "{}: x must be float32, float64 or bfloat16 and w of the same dtype (or float32 with "
        "bfloat16 x); got {} and {}",
        op, c10::toString(x.scalar_type()), c10::toString(w.scalar_type())));
}

}  // namespace

at::Tensor extractor_conv_reference(const at::Tensor& x, const at::Tensor& w) {
  check_inputs("extractor_conv_reference", x, w);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(x))
    return extractor_conv_reference(detail::widen(x), detail::widen(w)).to(at::kBFloat16);
  const int64_t t = x.size(1);
  at::Tensor ext = at::zeros_like(x);
  for (int64_t k = 0; k < t; ++k) {
    // Positions k .. t-1 receive x[i - k] W[k].
    at::Tensor term = at::matmul(x.narrow(1, 0, t - k), w[k]);
    ext = ext + at::constant_pad_nd(term, {0, 0, k, 0});
  }
  return ext;
}

at::Tensor extractor_conv_fft(const at::Tensor& x, const at::Tensor& w) {
  check_inputs("extractor_conv_fft", x, w);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(x))
    return extractor_conv_fft(detail::widen(x), detail::widen(w)).to(at::kBFloat16);
  const int64_t t = x.size(1);
  if (t == 0) return at::zeros_like(x);
  // Linear (not circular) convolution needs n >= 2t - 1; a power of two keeps the FFT fast.
  int64_t n = 1;
  while (n < 2 * t - 1) n <<= 1;
  const at::Tensor xf = torch::fft::rfft(x, n, 1);                  // [B, F, D]
  const at::Tensor wf = torch::fft::rfft(w.narrow(0, 0, t), n, 0);  // [F, D, D]
  const at::Tensor yf = at::matmul(xf.transpose(0, 1), wf);          // [F, B, D]
  return torch::fft::irfft(yf.transpose(0, 1), n, 1).narrow(1, 0, t);
}

at::Tensor extractor_conv(const at::Tensor& x, const at::Tensor& w, Backend backend) {
  return backend == Backend::kernel ? extractor_conv_fft(x, w) : extractor_conv_reference(x, w);
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
