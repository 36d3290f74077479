// The ces op's cases in the op-case registry (ops/op_cases.h): configurations that the
// tests check and `seqmix bench ops` times.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "seqmix/ops/ces_scan.h"
#include "ops/op_case_support.h"

namespace seqmix::mixers::ces {

using namespace ops;
using namespace ops::detail;

namespace {

// The cases call the ops by name; these references link the op's translation units -- and
// with them its registrations in the dispatcher -- into any program that uses the registry.
[[maybe_unused]] const void* const kRegisteredOps[] = {
    reinterpret_cast<const void*>(&ops::ces_scan),
};

// ---- CES scan (ces_scan.h): the recurrence against the authors' FFT formulation. The op's
// inputs are x and the raw parameters; the coefficients are computed inside both callables,
// so every parameter gradient passes through ces_coefficients.

// Raw parameters drawn like the ring initialisation (|lambda|^2 uniform in [0.01, 0.81],
// phase in [0, pi]) with dt log-uniform in [0.05, 0.5], larger than the layer's, so short
// sequences still mix.
OpInputs ces_inputs(int64_t B, int64_t L, int64_t H, int64_t C, bool masked, at::ScalarType dtype,
                    uint64_t seed) {
  Draw draw(seed);
  const at::Tensor r = at::sqrt(draw.rand({C}) * (0.81 - 0.01) + 0.01);
  const at::Tensor theta = draw.rand({C}) * 3.14159;
  // log lambda = log r + i theta; lambda' = log(log lambda).
  const at::Tensor lr = at::log(r), li = theta;
  const at::Tensor lam_r = 0.5 * at::log(lr * lr + li * li), lam_i = at::atan2(li, lr);
  const at::Tensor dt = at::exp(draw.rand({C}) * (std::log(0.5) - std::log(0.05)) + std::log(0.05));
  OpInputs in;
  in.inputs.push_back({"x", draw.randn({B, L, H}, dtype), true, 1, true});
  in.inputs.push_back(
      {"log_lambda", representable(at::stack({lam_r, lam_i}, 1), dtype), true, -1, false});
  in.inputs.push_back({"log_alpha", representable(at::log(dt).unsqueeze(1).repeat({1, 2}), dtype),
                       true, -1, false});
  in.inputs.push_back({"log_beta", draw.randn({C, 2}, dtype, 0.2), true, -1, false});
  if (masked) {
    in.mask = draw.rand({B, L}) > 0.3;
    in.mask.select(1, 0).fill_(true);
    if (L > 1) in.mask[0][L - 1] = false;  // at least one padded position, whatever the draw
  }
  return in;
}

OpCase ces_case(int64_t B, int64_t L, int64_t H, Direction dir, bool normalize, bool masked) {
  check_shape("ces_scan", B, L, H);
  const int64_t C = dir == Direction::bidirectional ? 2 * H : H;
  OpCase c;
  c.op = "ces_scan";
  c.config = dir_name(dir) + "_" + shape_name(B, L, H) + (normalize ? "_normalize" : "") +
             (masked ? "_masked" : "");
  c.B = B, c.L = L, c.D = H;
  c.direction = dir;
  c.variant = normalize ? "normalize" : "";
  c.masked = masked;
  c.zero_padded_outputs = true;
  c.gradcheck = L <= 1000;
  c.make_inputs = [=](at::ScalarType dtype, uint64_t seed) {
    return ces_inputs(B, L, H, C, masked, dtype, seed);
  };
  // The coefficients are computed from the raw parameters inside the case, so gradients are
  // checked all the way to the layer's parameters.
  c.op_args = [=](const std::vector<at::Tensor>& x, const at::Tensor& mask) {
    const CESCoefficients coef = ces_coefficients(x[1], x[2], x[3], 0.9999, normalize);
    return std::vector<c10::IValue>{x[0], coef.mu, coef.c, optional(mask), to_string(dir)};
  };
  dispatch_both(c);
  c.at_shape = [=](int64_t b, int64_t l, int64_t d) {
    return ces_case(b, l, d, dir, normalize, masked);
  };
  return c;
}

}  // namespace

void add_op_cases(std::vector<OpCase>& cases) {
  for (auto dir : {Direction::causal, Direction::bidirectional})
    for (bool normalize : {false, true})
      for (bool masked : {false, true})
        for (int64_t L : {1, 2, 17, 300}) {
          if (masked && L == 1) continue;  // position 0 is always valid: nothing to pad
          // H = 70: one full 64-channel run plus a partial one.
          cases.push_back(ces_case(2, L, 70, dir, normalize, masked));
          if (dir == Direction::causal && !normalize && !masked && L == 300) {
            cases.back().benchmarked = true;  // ETSMLP-LM's causal scan
            cases.back().bench_bytes = [](Backend b, int64_t B, int64_t L, int64_t D) {
              return (b == Backend::kernel ? 6 : 24) * B * L * D * 4;
            };
          }
        }
  cases.push_back(ces_case(2, 4096, 20, Direction::causal, true, false));
  cases.push_back(ces_case(2, 1000, 20, Direction::bidirectional, true, true));
}

}  // namespace seqmix::mixers::ces
