// seqmix::ces_scan and seqmix::_ces_scan_backward under the CUDA dispatch key: the complex
// diagonal recurrence of ETSMLP's CES (etsmlp eq. 10 and 14; the contract is
// include/seqmix/ops/ces_scan.h) as a chunked parallel scan.
//
// Per channel the op runs one or two "parts": the causal part (parameters of row h, states
// s_t = mu s_{t-1} + x_t, output Re(c s_t)) and, bidirectional, the backward part (row H + h,
// run from the right, output Re(c' s) with the state before x_t is added: lag 1). The input
// gradient is the same two parts with the directions swapped (causal part from the right,
// backward part from the left at lag 1) applied to the output gradient. The parameter
// gradients carry ds_t = d s_t / d mu (ds_t = mu ds_{t-1} + s_{t-1}) beside s_t:
//   dL/dc  = (Re, -Im) of sum_t g_t s_t,    dL/dmu = (Re, -Im) of c sum_t g_t ds_t.
//
// Three launches per scan: (1) each chunk of kChunk positions of each channel runs from a zero
// state and writes its final state; (2) one thread per channel walks the chunks in order and
// turns those into each chunk's incoming state (the zero-input step over n positions maps
// (s, ds) to (mu^n s, mu^n ds + n mu^(n-1) s)); (3) each chunk runs again from its incoming
// state and writes its outputs, or its partial parameter gradients (float64, summed
// afterwards: deterministic). Arithmetic in float32 for float32 and bfloat16 x, float64 for
// float64; the recurrence is stable for |mu| <= 1, so no overflow guard is needed.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>

#include "../ces_scan_internal.h"
#include "ops/dispatch.h"
#include "ops/low_precision.h"

namespace seqmix::ops {
namespace {

constexpr int kChunk = 128;
constexpr int kThreads = 256;

template <typename T>
struct Cx {
  T re, im;
};
template <typename T>
__host__ __device__ __forceinline__ Cx<T> operator*(Cx<T> a, Cx<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename T>
__host__ __device__ __forceinline__ Cx<T> operator+(Cx<T> a, Cx<T> b) {
  return {a.re + b.re, a.im + b.im};
}

// One part of the scan: which parameter rows, which direction, inclusive or at lag 1.
struct Part {
  int64_t row;     // offset of the part's parameter rows (0 or H)
  bool reverse;    // runs from the right
  bool exclusive;  // the output at t uses the state before x_t (lag 1)
};

template <typename scalar_t, typename acc_t>
struct CesArgs {
  const scalar_t* in;   // [B, L, H]: x (forward, parameter gradients) or dLoss/dy (input gradient)
  const scalar_t* g;    // [B, L, H] dLoss/dy (parameter gradients only)
  const bool* mask;     // [B, L] or null
  const acc_t* mu;      // [C, 2]
  const acc_t* c;       // [C, 2]
  scalar_t* out;        // [B, L, H] (values)
  Cx<acc_t>* state;     // [B, chunks, P, H] chunk summaries, then incoming states
  Cx<acc_t>* dstate;    // the same for ds (parameter gradients only)
  double* part_grads;   // [B * chunks, P * H, 4]: sum g s (re, im), sum g ds (re, im)
  int64_t B, L, H, chunks;
  int P;
  Part parts[2];
};

template <typename Args>
__device__ __forceinline__ bool valid_at(const Args& s, int64_t b, int64_t t) {
  return s.mask == nullptr || s.mask[b * s.L + t];
}

template <typename Args>
__device__ __forceinline__ void chunk_range(const Args& s, int64_t k, int64_t& lo, int64_t& hi) {
  lo = k * kChunk;
  hi = lo + kChunk < s.L ? lo + kChunk : s.L;
}

template <typename acc_t>
__device__ __forceinline__ Cx<acc_t> load_cx(const acc_t* p, int64_t row) {
  return {p[2 * row], p[2 * row + 1]};
}

// (1) each chunk of each part from a zero state; thread = (b, chunk, part, h).
template <typename scalar_t, typename acc_t, bool kDeriv>
__global__ void __launch_bounds__(kThreads) chunk_summary(CesArgs<scalar_t, acc_t> s) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.B * s.chunks * s.P * s.H) return;
  const int64_t h = idx % s.H, p = (idx / s.H) % s.P, k = (idx / (s.H * s.P)) % s.chunks;
  const int64_t b = idx / (s.H * s.P * s.chunks);
  const Part part = s.parts[p];
  const Cx<acc_t> mu = load_cx(s.mu, part.row + h);
  int64_t lo, hi;
  chunk_range(s, k, lo, hi);
  Cx<acc_t> st{0, 0}, dst{0, 0};
  for (int64_t n = 0; n < hi - lo; ++n) {
    const int64_t t = part.reverse ? hi - 1 - n : lo + n;
    const acc_t x = valid_at(s, b, t) ? static_cast<acc_t>(s.in[(b * s.L + t) * s.H + h]) : 0;
    if (kDeriv) dst = mu * dst + st;
    st = mu * st + Cx<acc_t>{x, 0};
  }
  s.state[idx] = st;
  if (kDeriv) s.dstate[idx] = dst;
}

// mu^n by squaring, in float64.
__device__ Cx<double> cpow(Cx<double> mu, int64_t n) {
  Cx<double> r{1, 0};
  while (n > 0) {
    if (n & 1) r = r * mu;
    mu = mu * mu;
    n >>= 1;
  }
  return r;
}

// (2) summaries -> incoming states, in each part's order; thread = (b, part, h).
template <typename scalar_t, typename acc_t, bool kDeriv>
__global__ void __launch_bounds__(kThreads) chunk_carries(CesArgs<scalar_t, acc_t> s) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.B * s.P * s.H) return;
  const int64_t h = idx % s.H, p = (idx / s.H) % s.P, b = idx / (s.H * s.P);
  const Part part = s.parts[p];
  const Cx<acc_t> m = load_cx(s.mu, part.row + h);
  const Cx<double> mu{double(m.re), double(m.im)};
  Cx<double> st{0, 0}, dst{0, 0};
  for (int64_t i = 0; i < s.chunks; ++i) {
    const int64_t k = part.reverse ? s.chunks - 1 - i : i;
    const int64_t at = ((b * s.chunks + k) * s.P + p) * s.H + h;
    const Cx<acc_t> sum = s.state[at];
    Cx<acc_t> dsum{0, 0};
    if (kDeriv) dsum = s.dstate[at];
    s.state[at] = {static_cast<acc_t>(st.re), static_cast<acc_t>(st.im)};
    if (kDeriv) s.dstate[at] = {static_cast<acc_t>(dst.re), static_cast<acc_t>(dst.im)};
    int64_t lo, hi;
    chunk_range(s, k, lo, hi);
    const int64_t n = hi - lo;
    const Cx<double> mun = cpow(mu, n);
    if (kDeriv) {
      const Cx<double> step = cpow(mu, n - 1) * Cx<double>{double(n), 0};
      dst = mun * dst + step * st + Cx<double>{double(dsum.re), double(dsum.im)};
    }
    st = mun * st + Cx<double>{double(sum.re), double(sum.im)};
  }
}

// (3a) outputs: thread = (b, chunk, h), both parts (the second adds to the first's output).
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) chunk_values(CesArgs<scalar_t, acc_t> s) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.B * s.chunks * s.H) return;
  const int64_t h = idx % s.H, k = (idx / s.H) % s.chunks, b = idx / (s.H * s.chunks);
  int64_t lo, hi;
  chunk_range(s, k, lo, hi);
  for (int p = 0; p < s.P; ++p) {
    const Part part = s.parts[p];
    const Cx<acc_t> mu = load_cx(s.mu, part.row + h), c = load_cx(s.c, part.row + h);
    Cx<acc_t> st = s.state[((b * s.chunks + k) * s.P + p) * s.H + h];
    for (int64_t n = 0; n < hi - lo; ++n) {
      const int64_t t = part.reverse ? hi - 1 - n : lo + n;
      const int64_t at = (b * s.L + t) * s.H + h;
      const bool valid = valid_at(s, b, t);
      const acc_t x = valid ? static_cast<acc_t>(s.in[at]) : 0;
      if (part.exclusive) {
        const acc_t y = (c * st).re;
        st = mu * st + Cx<acc_t>{x, 0};
        if (valid) s.out[at] = static_cast<scalar_t>(static_cast<acc_t>(s.out[at]) + y);
      } else {
        st = mu * st + Cx<acc_t>{x, 0};
        const acc_t y = (c * st).re;
        if (p == 0) s.out[at] = static_cast<scalar_t>(valid ? y : acc_t(0));
        else if (valid) s.out[at] = static_cast<scalar_t>(static_cast<acc_t>(s.out[at]) + y);
      }
    }
  }
}

// (3b) parameter gradients: thread = (b, chunk, part, h); sums g s and g ds over the chunk.
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads) chunk_param_grads(CesArgs<scalar_t, acc_t> s) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.B * s.chunks * s.P * s.H) return;
  const int64_t h = idx % s.H, p = (idx / s.H) % s.P, k = (idx / (s.H * s.P)) % s.chunks;
  const int64_t b = idx / (s.H * s.P * s.chunks);
  const Part part = s.parts[p];
  const Cx<acc_t> mu = load_cx(s.mu, part.row + h);
  Cx<acc_t> st = s.state[idx], dst = s.dstate[idx];
  int64_t lo, hi;
  chunk_range(s, k, lo, hi);
  double gs_re = 0, gs_im = 0, gd_re = 0, gd_im = 0;
  for (int64_t n = 0; n < hi - lo; ++n) {
    const int64_t t = part.reverse ? hi - 1 - n : lo + n;
    const int64_t at = (b * s.L + t) * s.H + h;
    const bool valid = valid_at(s, b, t);
    const acc_t x = valid ? static_cast<acc_t>(s.in[at]) : 0;
    const acc_t g = valid ? static_cast<acc_t>(s.g[at]) : 0;
    if (part.exclusive) {
      gs_re += double(g * st.re);
      gs_im += double(g * st.im);
      gd_re += double(g * dst.re);
      gd_im += double(g * dst.im);
    }
    dst = mu * dst + st;
    st = mu * st + Cx<acc_t>{x, 0};
    if (!part.exclusive) {
      gs_re += double(g * st.re);
      gs_im += double(g * st.im);
      gd_re += double(g * dst.re);
      gd_im += double(g * dst.im);
    }
  }
  double* out = s.part_grads + ((b * s.chunks + k) * s.P * s.H + p * s.H + h) * 4;
  out[0] = gs_re;
  out[1] = gs_im;
  out[2] = gd_re;
  out[3] = gd_im;
}

// ---- Host side ----

template <typename Args>
void launch(void (*kernel)(Args), int64_t threads, const Args& args) {
  if (threads == 0) return;
  const auto blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename acc_t>
CesArgs<scalar_t, acc_t> make_args(const at::Tensor& in, const at::Tensor& mu, const at::Tensor& c,
                                   const at::Tensor& mask, bool bidir, bool swapped) {
  CesArgs<scalar_t, acc_t> s{};
  s.in = in.data_ptr<scalar_t>();
  s.mask = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  s.mu = mu.data_ptr<acc_t>();
  s.c = c.data_ptr<acc_t>();
  s.B = in.size(0);
  s.L = in.size(1);
  s.H = in.size(2);
  s.chunks = (s.L + kChunk - 1) / kChunk;
  s.P = bidir ? 2 : 1;
  // The op's parts, or (swapped) those of its transpose, the input gradient.
  s.parts[0] = Part{0, swapped, false};
  s.parts[1] = Part{s.H, !swapped, true};
  return s;
}

// y = the op's parts (swapped = false) or their transposes (swapped = true) applied to `in`.
template <typename scalar_t, typename acc_t>
void run_values(const at::Tensor& in, const at::Tensor& mu, const at::Tensor& c,
                const at::Tensor& mask, bool bidir, bool swapped, at::Tensor& out) {
  auto s = make_args<scalar_t, acc_t>(in, mu, c, mask, bidir, swapped);
  s.out = out.data_ptr<scalar_t>();
  at::Tensor state = at::empty({s.B, s.chunks, s.P, s.H, 2}, mu.options());
  s.state = reinterpret_cast<Cx<acc_t>*>(state.data_ptr<acc_t>());
  launch(chunk_summary<scalar_t, acc_t, false>, s.B * s.chunks * s.P * s.H, s);
  launch(chunk_carries<scalar_t, acc_t, false>, s.B * s.P * s.H, s);
  launch(chunk_values<scalar_t, acc_t>, s.B * s.chunks * s.H, s);
}

// [C, 4] float64: per parameter row, sum g s (re, im) and sum g ds (re, im).
template <typename scalar_t, typename acc_t>
at::Tensor run_param_grads(const at::Tensor& x, const at::Tensor& g, const at::Tensor& mu,
                           const at::Tensor& c, const at::Tensor& mask, bool bidir) {
  auto s = make_args<scalar_t, acc_t>(x, mu, c, mask, bidir, false);
  s.g = g.data_ptr<scalar_t>();
  at::Tensor state = at::empty({s.B, s.chunks, s.P, s.H, 2}, mu.options());
  at::Tensor dstate = at::empty_like(state);
  at::Tensor parts = at::empty({s.B * s.chunks, s.P * s.H, 4}, x.options().dtype(at::kDouble));
  s.state = reinterpret_cast<Cx<acc_t>*>(state.data_ptr<acc_t>());
  s.dstate = reinterpret_cast<Cx<acc_t>*>(dstate.data_ptr<acc_t>());
  s.part_grads = parts.data_ptr<double>();
  launch(chunk_summary<scalar_t, acc_t, true>, s.B * s.chunks * s.P * s.H, s);
  launch(chunk_carries<scalar_t, acc_t, true>, s.B * s.P * s.H, s);
  launch(chunk_param_grads<scalar_t, acc_t>, s.B * s.chunks * s.P * s.H, s);
  return parts.sum(0);
}

template <typename F>
void dispatch(const at::Tensor& x, F&& f) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return f(float{}, float{});
    case at::kDouble:
      return f(double{}, double{});
    case at::kBFloat16:
      return f(at::BFloat16{}, float{});
    default:
      TORCH_CHECK(false, "ces_scan: unexpected dtype ", x.scalar_type());
  }
}

// The op's arguments, checked, as the kernels take them: x and the mask contiguous, the
// coefficients widened to the arithmetic type (float32 for bfloat16 x).
struct Inputs {
  Direction dir;
  at::Tensor x, mu, c, mask;
};

Inputs inputs(const char* fn, const at::Tensor& x, const at::Tensor& mu, const at::Tensor& c,
              const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const at::Tensor mask = detail::or_undefined(mask_opt);
  const Direction dir = detail::direction_arg(fn, direction);
  ces_check_scan(fn, x, mu, c, mask, dir);
  return {dir, x.contiguous(), detail::widen(mu).contiguous(), detail::widen(c).contiguous(),
          mask.defined() ? mask.contiguous() : mask};
}

at::Tensor ces_scan_cuda(const at::Tensor& x_in, const at::Tensor& mu_in, const at::Tensor& c_in,
                         const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Inputs in = inputs("ces_scan", x_in, mu_in, c_in, mask_opt, direction);
  const at::Tensor &x = in.x, &mu = in.mu, &c = in.c, &mask = in.mask;
  const Direction dir = in.dir;
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  dispatch(x, [&](auto s_tag, auto a_tag) {
    using scalar_t = decltype(s_tag);
    using acc_t = decltype(a_tag);
    run_values<scalar_t, acc_t>(x, mu, c, mask, dir == Direction::bidirectional, false, y);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ces_scan_backward_cuda(
    const at::Tensor& grad, const at::Tensor& x_in, const at::Tensor& mu_in, const at::Tensor& c_in,
    const std::optional<at::Tensor>& mask_opt, c10::string_view direction) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Inputs in = inputs("_ces_scan_backward", x_in, mu_in, c_in, mask_opt, direction);
  const at::Tensor &x = in.x, &mu = in.mu, &c = in.c, &mask = in.mask;
  const Direction dir = in.dir;
  const at::Tensor g = grad.to(x.scalar_type()).contiguous();
  const bool bidir = dir == Direction::bidirectional;
  at::Tensor gx = at::empty_like(x);
  if (x.numel() == 0)
    return {gx.zero_(), at::zeros_like(mu_in), at::zeros_like(c_in)};
  at::Tensor sums;
  dispatch(x, [&](auto s_tag, auto a_tag) {
    using scalar_t = decltype(s_tag);
    using acc_t = decltype(a_tag);
    run_values<scalar_t, acc_t>(g, mu, c, mask, bidir, true, gx);
    sums = run_param_grads<scalar_t, acc_t>(x, g, mu, c, mask, bidir);
  });
  // dL/dc = (Re, -Im) sum g s;  dL/dmu = (Re, -Im) c sum g ds  (c, mu as [C, 2] pairs).
  const at::Tensor cd = c.to(at::kDouble);
  const at::Tensor gs_re = sums.select(1, 0), gs_im = sums.select(1, 1);
  const at::Tensor gd_re = sums.select(1, 2), gd_im = sums.select(1, 3);
  const at::Tensor cr = cd.select(1, 0), ci = cd.select(1, 1);
  const at::Tensor gc = at::stack({gs_re, -gs_im}, 1);
  const at::Tensor gmu = at::stack({cr * gd_re - ci * gd_im, -(cr * gd_im + ci * gd_re)}, 1);
  return {gx, gmu.to(mu_in.scalar_type()), gc.to(c_in.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(seqmix, CUDA, m) {
  m.impl("ces_scan", &ces_scan_cuda);
  m.impl("_ces_scan_backward", &ces_scan_backward_cuda);
}

}  // namespace seqmix::ops
