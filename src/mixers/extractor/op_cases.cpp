// The extractor op's cases in the op-case registry (ops/op_cases.h): configurations that the
// tests check and `seqmix bench ops` times.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "seqmix/ops/extractor_conv.h"
#include "ops/op_case_support.h"

namespace seqmix::mixers::extractor {

using namespace ops;
using namespace ops::detail;

namespace {

// The cases call the ops by name; these references link the op's translation units -- and
// with them its registrations in the dispatcher -- into any program that uses the registry.
[[maybe_unused]] const void* const kRegisteredOps[] = {
    reinterpret_cast<const void*>(&ops::extractor_conv),
};

// ---- The Extractor's convolution (extractor_conv.h): FFT against the per-lag sum.

OpCase extractor_case(int64_t B, int64_t t, int64_t D, int64_t l) {
  check_shape("extractor_conv", B, t, D);
  if (l < t)
    throw std::invalid_argument("extractor_conv: l = " + std::to_string(l) +
                                " lag matrices cannot cover t = " + std::to_string(t));
  OpCase c;
  c.op = "extractor_conv";
  c.config = shape_name(B, t, D) + "_l" + std::to_string(l);
  c.B = B, c.L = t, c.D = D;
  c.direction = Direction::causal;
  c.gradcheck = B * t * D <= 4096;
  c.make_inputs = [=](at::ScalarType dtype, uint64_t seed) {
    Draw draw(seed);
    OpInputs in;
    in.inputs.push_back({"x", draw.randn({B, t, D}, dtype), true, 1, false});
    // Scaled like the layer's initialisation, so ext has about the input's scale.
    in.inputs.push_back({"w", draw.randn({l, D, D}, dtype, 1 / std::sqrt(static_cast<double>(D))),
                         true, -1, false});
    return in;
  };
  c.op_args = [](const std::vector<at::Tensor>& x, const at::Tensor&) {
    return std::vector<c10::IValue>{x[0], x[1]};
  };
  dispatch_both(c);
  c.at_shape = [](int64_t b, int64_t L, int64_t d) { return extractor_case(b, L, d, L); };
  return c;
}

}  // namespace

void add_op_cases(std::vector<OpCase>& cases) {
  cases.push_back(extractor_case(2, 1, 3, 4));
  cases.push_back(extractor_case(2, 7, 3, 8));
  cases.push_back(extractor_case(1, 16, 4, 16));
  cases.push_back(extractor_case(3, 37, 5, 64));
  cases.push_back(extractor_case(2, 128, 16, 128));
  cases.back().benchmarked = true;  // the paper's window (Table 1: l = t = 128)
  // l = L lag matrices of D x D; the reference's per-lag sum keeps a [B, L, D] per lag.
  cases.back().bench_bytes = [](Backend b, int64_t B, int64_t L, int64_t D) {
    const int64_t bld = B * L * D * 4, lags = L * D * D * 4;
    return b == Backend::kernel ? 16 * bld + 8 * lags : 4 * L * bld + 4 * lags;
  };
}

}  // namespace seqmix::mixers::extractor
