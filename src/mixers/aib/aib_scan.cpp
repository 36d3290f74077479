#include "seqmix/ops/aib_scan.h"

#include <stdexcept>

#include <torch/library.h>

#include "aib_scan_internal.h"
#include "ops/dispatch.h"
#include "ops/low_precision.h"

namespace seqmix::ops {

AIBWeights parse_aib_weights(const std::string& name) {
  if (name == "prefix_exp") return AIBWeights::prefix_exp;
  if (name == "exp") return AIBWeights::exp;
  if (name == "ones") return AIBWeights::ones;
  throw std::invalid_argument("unknown AIB weighting '" + name +
                              "' (expected prefix_exp, exp or ones)");
}

std::string to_string(AIBWeights w) {
  switch (w) {
    case AIBWeights::prefix_exp:
      return "prefix_exp";
    case AIBWeights::exp:
      return "exp";
    case AIBWeights::ones:
      return "ones";
  }
  return "?";
}

int64_t aib_num_levels(int64_t max_len) {
  // 2^k must stay representable: past 2^62 the loop below would never end.
  TORCH_CHECK_VALUE(max_len <= (int64_t{1} << 62), "aib_num_levels: max_len must be at most 2^62, got ",
                    max_len);
  int64_t k = 0;
  while ((int64_t{1} << k) < max_len) ++k;
  return k < 1 ? 1 : k;
}

at::Tensor aib_level_weights(const at::Tensor& w, AIBWeights kind) {
  switch (kind) {
    case AIBWeights::prefix_exp:
      return at::exp(at::cumsum(w, 0));
    case AIBWeights::exp:
      return at::exp(w);
    case AIBWeights::ones:
      return at::ones_like(w);
  }
  return w;
}

at::Tensor aib_lag_weights(const at::Tensor& level_weights, int64_t n) {
  TORCH_CHECK(level_weights.dim() == 2, "aib_lag_weights: level_weights must be [K, D], got ",
              level_weights.sizes());
  const int64_t K = level_weights.size(0);
  TORCH_CHECK(n <= (int64_t{1} << K), "aib_lag_weights: ", K, " levels cover distances below ",
              (int64_t{1} << K), ", asked for ", n);
  // a_d = a_{d without its lowest bit} * W_{index of that bit}: one multiply per distance.
  std::vector<at::Tensor> a;
  a.reserve(static_cast<size_t>(n));
  if (n > 0) a.push_back(at::ones_like(level_weights[0]));
  for (int64_t d = 1; d < n; ++d) {
    const int64_t low = d & (-d);
    const int64_t bit = __builtin_ctzll(static_cast<unsigned long long>(low));
    a.push_back(a[static_cast<size_t>(d - low)] * level_weights[bit]);
  }
  if (a.empty()) return at::empty({0, level_weights.size(1)}, level_weights.options());
  return at::stack(a, 0);
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Inputs with padding applied: A = -inf and V = 0 at padded positions (they weigh nothing),
// and V brought into range: O = H / U is linear in V, so a (batch, channel) whose |V| reaches
// 2^64 (float32) or 2^960 (float64) is computed on V * 2^-64 and its outputs scaled back by
// 2^64 (exact: powers of two), which keeps H = sum of weights times V, at most L <= 2^62
// times max |V|, inside the dtype's range wherever O is. Values below 2^-62 (float32) in such
// a channel, negligible beside its 2^64, round towards 0.
struct Prepared {
  at::Tensor a;      // [B, L, D], -inf at padded positions
  at::Tensor v;      // [B, L, D], 0 at padded positions, times `scale`
  at::Tensor scale;  // [B, 1, D], 1 or 2^-64, detached
  at::Tensor valid;  // [B, L, 1] bool, or undefined
};

}  // namespace

void aib_check_inputs(const char* fn, const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                      const at::Tensor& mask, Direction direction, AIBWeights weights) {
  TORCH_CHECK(a.defined() && a.dim() == 3, fn, ": A must be [B, L, D], got ",
              a.defined() ? a.sym_sizes() : c10::SymIntArrayRef{});
  TORCH_CHECK(v.defined(), fn, ": V must match A ", a.sym_sizes(), ", got an undefined tensor");
  TORCH_SYM_CHECK(detail::same_sizes(v, a), fn, ": V must match A ", a.sym_sizes(), ", got ",
                  v.sym_sizes());
  TORCH_CHECK(detail::activation_dtype_ok(a.scalar_type()), fn,
              ": A must be float32, float64 or bfloat16, got ", a.scalar_type());
  TORCH_CHECK(v.scalar_type() == a.scalar_type(), fn, ": V dtype ", v.scalar_type(),
              " differs from A dtype ", a.scalar_type());
  TORCH_CHECK(v.device() == a.device(), fn, ": V is on ", v.device(), " but A on ", a.device());
  const c10::SymInt L = a.sym_size(1), D = a.sym_size(2);
  if (weights != AIBWeights::ones || w.defined()) {
    TORCH_CHECK(w.defined() && w.dim() == 2, fn, ": w must be [K, ", D, "], got ",
                w.defined() ? w.sym_sizes() : c10::SymIntArrayRef{});
    TORCH_SYM_CHECK(w.sym_size(1).sym_eq(D), fn, ": w must be [K, ", D, "], got ", w.sym_sizes());
    TORCH_CHECK(detail::param_dtype_fits(w.scalar_type(), a.scalar_type()), fn, ": w dtype ",
                w.scalar_type(), " does not go with A dtype ", a.scalar_type(),
                " (the same dtype, or float32 with bfloat16 A)");
    TORCH_CHECK(w.device() == a.device(), fn, ": w is on ", w.device(), " but A on ",
                a.device());
    // The number of levels is a parameter's shape: fixed for a model, so concrete here.
    const int64_t K = w.sym_size(0).guard_int(__FILE__, __LINE__);
    TORCH_CHECK(K <= 62, fn, ": w has ", K, " levels; at most 62 are meaningful");
    TORCH_SYM_CHECK(L.sym_le(c10::SymInt(int64_t{1} << K)), fn, ": w has ", K,
                    " levels, which cover sequences up to ", (int64_t{1} << K), " but L = ", L,
                    " (raise max_len)");
  }
  if (direction == Direction::bidirectional)
    TORCH_SYM_CHECK((D % 2).sym_eq(0), fn,
                    ": the bidirectional form splits channels in halves; D = ", D, " is odd");
  if (mask.defined())
    TORCH_CHECK(mask.device() == a.device(), fn, ": mask is on ", mask.device(), " but A on ",
                a.device());
  detail::check_padding_mask(fn, mask, a.sym_size(0), L);
}

namespace {

Prepared prepare(const at::Tensor& a, const at::Tensor& v, const at::Tensor& mask) {
  Prepared p;
  p.a = a;
  p.v = v;
  if (mask.defined()) {
    p.valid = mask.unsqueeze(-1);
    p.a = a.masked_fill(p.valid.logical_not(), -kInf);
    p.v = v.masked_fill(p.valid.logical_not(), 0);
  }
  const double limit = a.scalar_type() == at::kDouble ? 0x1p960 : 0x1p64;
  // One zero row appended: the maximum of an empty sequence is 0, and no size is read (the
  // reference runs on symbolic shapes under torch.compile's dynamic tracing).
  const at::Tensor top =
      at::constant_pad_nd(p.v.detach().abs(), {0, 0, 0, 1}).amax(1, /*keepdim=*/true);
  p.scale = at::where(top >= limit, at::full_like(top, 0x1p-64), at::ones_like(top));
  p.v = p.v * p.scale;
  return p;
}

at::Tensor finish(const at::Tensor& h, const at::Tensor& u, const Prepared& p) {
  // Where U == 0 nothing valid is in the window: output 0, and keep the division away from
  // 0/0 so that no NaN reaches the gradient either. A NaN in A or V (U or H NaN) stays NaN.
  at::Tensor empty = u == 0;
  at::Tensor o = at::where(empty, at::zeros_like(h), h / at::where(empty, at::ones_like(u), u));
  o = o / p.scale;
  if (p.valid.defined()) o = o.masked_fill(p.valid.logical_not(), 0);
  return o;
}

// One level of the scan with a maximum per position: (m, h, u) at i absorbs (m + log W_j, h,
// u) from i - s (prefix) or i + s (suffix), both rescaled to their larger maximum. h and u are
// H and U times exp(-m): every exponential taken is at most 1, and a term only underflows
// where it is negligible beside the one that set the maximum. Out of place, for autograd.
void level(at::Tensor& m, at::Tensor& h, at::Tensor& u, const at::Tensor& lwj, int64_t s,
           bool suffix) {
  const int64_t n = m.size(1);
  if (s >= n) return;
  auto shift = [&](const at::Tensor& x, double fill) {
    return suffix ? at::constant_pad_nd(x.narrow(1, s, n - s), {0, 0, 0, s}, fill)
                  : at::constant_pad_nd(x.narrow(1, 0, n - s), {0, 0, s, 0}, fill);
  };
  const at::Tensor m2 = shift(m, -kInf) + lwj;
  const at::Tensor top = at::maximum(m, m2);
  const at::Tensor safe = at::where(at::isneginf(top), at::zeros_like(top), top);
  const at::Tensor e1 = at::exp(m - safe), e2 = at::exp(m2 - safe);
  h = h * e1 + shift(h, 0) * e2;
  u = u * e1 + shift(u, 0) * e2;
  m = top;
}

// Weird-Net's Algorithms 1 (causal) and 2 (bidirectional) with their levels carried as
// (maximum, H e^-max, U e^-max) per position: exact for any finite A and w, and causal (a
// position's output reads nothing after it, even through rounding). `fn` names the caller.
at::Tensor scan_per_position_max(const char* fn, const at::Tensor& a, const at::Tensor& v,
                                 const at::Tensor& w, const at::Tensor& mask,
                                 Direction direction, AIBWeights weights) {
  aib_check_inputs(fn, a, v, w, mask, direction, weights);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(a))
    return scan_per_position_max(fn, detail::widen(a), detail::widen(v), detail::widen(w),
                                 mask, direction, weights)
        .to(at::kBFloat16);
  const int64_t L = a.size(1), D = a.size(2);
  const Prepared p = prepare(a, v, mask);
  at::Tensor m = p.a, h = p.v, u = at::ones_like(a);
  if (p.valid.defined()) u = u.masked_fill(p.valid.logical_not(), 0);
  if (L > 1) {
    // log W straight from w (cumsum(w) for prefix_exp): W itself may overflow or underflow.
    const at::Tensor lw = aib_log_weights(w, a, weights);  // [K, D]
    const int64_t levels = aib_num_levels(L);
    if (direction == Direction::causal) {
      for (int64_t j = 0; j < levels; ++j) level(m, h, u, lw[j], int64_t{1} << j, false);
    } else {
      const int64_t half = D / 2;
      at::Tensor mf = m.narrow(2, 0, half), hf = h.narrow(2, 0, half), uf = u.narrow(2, 0, half);
      at::Tensor mb = m.narrow(2, half, half), hb = h.narrow(2, half, half),
                 ub = u.narrow(2, half, half);
      for (int64_t j = 0; j < levels; ++j) {
        level(mf, hf, uf, lw[j].narrow(0, 0, half), int64_t{1} << j, false);
        level(mb, hb, ub, lw[j].narrow(0, half, half), int64_t{1} << j, true);
      }
      h = at::cat({hf, hb}, 2);
      u = at::cat({uf, ub}, 2);
    }
  }
  return finish(h, u, p);
}

}  // namespace

at::Tensor aib_scan_reference(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                              const at::Tensor& mask, Direction direction, AIBWeights weights) {
  return scan_per_position_max("aib_scan_reference", a, v, w, mask, direction, weights);
}

at::Tensor aib_scan_stable(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                           const at::Tensor& mask, Direction direction, AIBWeights weights) {
  return scan_per_position_max("aib_scan", a, v, w, mask, direction, weights);
}

at::Tensor aib_scan_closed_form(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                                const at::Tensor& mask, Direction direction,
                                AIBWeights weights) {
  aib_check_inputs("aib_scan_closed_form", a, v, w, mask, direction, weights);
  const detail::AutocastOff autocast_off;
  if (detail::is_bf16(a))
    return aib_scan_closed_form(detail::widen(a), detail::widen(v), detail::widen(w), mask,
                                direction, weights)
        .to(at::kBFloat16);
  const int64_t L = a.size(1), D = a.size(2);
  const Prepared p = prepare(a, v, mask);
  // log a_d = sum of log W_k over the bits k of d, built as log a_{d - lowest bit} + log W_bit.
  const at::Tensor lw = aib_log_weights(w, a, weights);
  std::vector<at::Tensor> lag_v;
  for (int64_t d = 0; d < L; ++d) {
    if (d == 0) {
      lag_v.push_back(at::zeros_like(lw[0]));
      continue;
    }
    const int64_t low = d & (-d);
    lag_v.push_back(lag_v[static_cast<size_t>(d - low)] +
                    lw[__builtin_ctzll(static_cast<unsigned long long>(low))]);
  }
  if (L == 0) return finish(p.v, at::zeros_like(p.v), p);
  const at::Tensor log_lag = at::stack(lag_v, 0);  // [L, D]
  // S[b, i, j, c] = log a_{|i-j|}[c] + A[b, j, c] where j is in i's window, -inf elsewhere;
  // O_i = sum_j softmax_j(S) V_j, each row shifted by its own maximum.
  const at::Tensor idx = at::arange(L, a.options().dtype(at::kLong));
  const at::Tensor dist = idx.unsqueeze(1) - idx.unsqueeze(0);  // [L, L] i - j
  auto scores = [&](const at::Tensor& lag_c, const at::Tensor& a_c, bool suffix) {
    const at::Tensor d = suffix ? -dist : dist;
    const at::Tensor g = lag_c.index({d.clamp_min(0)});  // [L, L, C]
    const at::Tensor prior = g.masked_fill((d < 0).unsqueeze(-1), -kInf);
    return prior.unsqueeze(0) + a_c.unsqueeze(1);  // [B, L, L, C]
  };
  auto weigh = [&](const at::Tensor& s, const at::Tensor& v_c) {  // -> (H, U) [B, L, C]
    at::Tensor top = std::get<0>(s.max(2, /*keepdim=*/true));
    top = at::where(at::isneginf(top), at::zeros_like(top), top).detach();
    const at::Tensor e = at::exp(s - top);
    return std::make_pair((e * v_c.unsqueeze(1)).sum(2), e.sum(2));
  };
  at::Tensor H, U;
  if (direction == Direction::causal) {
    std::tie(H, U) = weigh(scores(log_lag, p.a, false), p.v);
  } else {
    const int64_t half = D / 2;
    auto [hf, uf] = weigh(scores(log_lag.narrow(1, 0, half), p.a.narrow(2, 0, half), false),
                          p.v.narrow(2, 0, half));
    auto [hb, ub] = weigh(scores(log_lag.narrow(1, half, half), p.a.narrow(2, half, half), true),
                          p.v.narrow(2, half, half));
    H = at::cat({hf, hb}, 2);
    U = at::cat({uf, ub}, 2);
  }
  return finish(H, U, p);
}


at::Tensor aib_scan(const at::Tensor& a, const at::Tensor& v, const at::Tensor& w,
                    const at::Tensor& mask, Direction direction, AIBWeights weights,
                    Backend backend) {
  if (backend == Backend::reference) {
    static const auto op =
        detail::find_op<at::Tensor(const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&,
                                   const std::optional<at::Tensor>&, c10::string_view,
                                   c10::string_view)>("seqmix::aib_scan_reference");
    return op.call(a, v, detail::optional(w), detail::optional(mask), to_string(direction),
                   to_string(weights));
  }
  return aib_scan_kernel(a, v, w, mask, direction, weights);
}

namespace {

at::Tensor reference_op(const at::Tensor& a, const at::Tensor& v,
                        const std::optional<at::Tensor>& w, const std::optional<at::Tensor>& mask,
                        c10::string_view direction, c10::string_view weights) {
  return aib_scan_reference(a, v, detail::or_undefined(w), detail::or_undefined(mask),
                            detail::direction_arg("aib_scan_reference", direction),
                            aib_weights_arg("aib_scan_reference", weights));
}

}  // namespace

// The schemas (Python: torch.ops.seqmix.*). aib_scan is implemented per dispatch key in
// aib_scan_kernel.cpp; _aib_scan_backward is its backward, an op of its own so that each
// device registers it beside the forward; the reference is ATen code, so it is
// CompositeImplicitAutograd: autograd, fake tensors and every device come with ATen's ops.
TORCH_LIBRARY_FRAGMENT(seqmix, m) {
  const std::vector<at::Tag> tags{at::Tag::pt2_compliant_tag};
  m.def(
      "aib_scan(Tensor a, Tensor v, Tensor? w, Tensor? mask=None, str direction=\"causal\", "
      "str weights=\"prefix_exp\") -> Tensor",
      tags);
  m.def(
      "aib_scan_reference(Tensor a, Tensor v, Tensor? w, Tensor? mask=None, "
      "str direction=\"causal\", str weights=\"prefix_exp\") -> Tensor",
      tags);
  m.def(
      "_aib_scan_backward(Tensor grad, Tensor a, Tensor v, Tensor? w, Tensor? mask, "
      "str direction, str weights) -> (Tensor, Tensor, Tensor)",
      tags);
  m.impl("aib_scan_reference", c10::DispatchKey::CompositeImplicitAutograd, &reference_op);
}

}  // namespace seqmix::ops
