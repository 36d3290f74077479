// The causal mean's cases in the op-case registry (ops/op_cases.h).
#include <stdexcept>
#include <string>

#include "causal_mean.h"
#include "ops/op_case_support.h"

namespace seqmix::mixers::mean {

using namespace ops;
using namespace ops::detail;

namespace {

// The cases call the op by name; this reference links its translation unit -- and with it
// its registrations in the dispatcher -- into any program that uses the registry.
[[maybe_unused]] const void* const kRegisteredOps[] = {
    reinterpret_cast<const void*>(&causal_mean),
};

OpCase mean_case(int64_t B, int64_t L, int64_t D, int64_t window, bool masked) {
  check_shape("causal_mean", B, L, D);
  OpCase c;
  c.op = "causal_mean";
  c.config = shape_name(B, L, D) + "_w" + std::to_string(window) + (masked ? "_masked" : "");
  c.B = B, c.L = L, c.D = D;
  c.masked = masked;
  c.zero_padded_outputs = true;
  c.gradcheck = B * L * D <= 4096;
  c.make_inputs = [=](at::ScalarType dtype, uint64_t seed) {
    Draw draw(seed);
    OpInputs in;
    in.inputs.push_back({"x", draw.randn({B, L, D}, dtype), true, 1, true});
    if (masked) {
      in.mask = draw.rand({B, L}) > 0.3;
      if (L > 1) in.mask[0][L - 1] = false;  // at least one padded position
    }
    return in;
  };
  c.op_args = [=](const std::vector<at::Tensor>& x, const at::Tensor& mask) {
    return std::vector<c10::IValue>{x[0], window, optional(mask)};
  };
  dispatch_both(c);
  c.at_shape = [=](int64_t b, int64_t l, int64_t d) { return mean_case(b, l, d, window, masked); };
  return c;
}

}  // namespace

void add_op_cases(std::vector<OpCase>& cases) {
  for (int64_t window : {1, 3, 16})
    for (bool masked : {false, true})
      for (int64_t L : {1, 7, 40}) {
        if (masked && L == 1) continue;
        cases.push_back(mean_case(2, L, 20, window, masked));
      }
  cases.push_back(mean_case(2, 1000, 32, 8, false));
  cases.back().benchmarked = true;
}

}  // namespace seqmix::mixers::mean
