// The aib op's cases in the op-case registry (ops/op_cases.h): configurations that the
// tests check and `seqmix bench ops` times.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "seqmix/ops/aib_scan.h"
#include "ops/op_case_support.h"

namespace seqmix::mixers::aib {

using namespace ops;
using namespace ops::detail;

namespace {

// The cases call the ops by name; these references link the op's translation units -- and
// with them its registrations in the dispatcher -- into any program that uses the registry.
[[maybe_unused]] const void* const kRegisteredOps[] = {
    reinterpret_cast<const void*>(&ops::aib_scan),
    reinterpret_cast<const void*>(&ops::aib_scan_kernel),
};

// ---- AIB scan (aib_scan.h): the fused kernel against the papers' algorithm in ATen.

// Row 0 keeps a valid prefix of ~2/3 of L; row 1 starts with padding (L > 1) and has a hole
// in the middle; further rows alternate. A fully padded window occurs at row 1's start.
at::Tensor aib_mask(int64_t B, int64_t L) {
  at::Tensor m = at::ones({B, L}, at::kBool);
  for (int64_t b = 0; b < B; ++b) {
    if (b % 2 == 0) {
      const int64_t keep = (2 * L) / 3 + (L == 1);
      m[b].narrow(0, keep, L - keep).fill_(false);
    } else if (L > 1) {
      m[b][0] = false;
      m[b].narrow(0, L / 3, std::max<int64_t>(1, L / 4)).fill_(false);
    }
  }
  return m;
}

OpCase aib_case(int64_t B, int64_t L, int64_t D, Direction dir, AIBWeights weights, bool masked) {
  check_shape("aib_scan", B, L, D);
  if (dir == Direction::bidirectional && D % 2)
    throw std::invalid_argument("aib_scan: the bidirectional scan needs an even D, got " +
                                std::to_string(D));
  OpCase c;
  c.op = "aib_scan";
  c.config = dir_name(dir) + "_" + to_string(weights) + "_" + shape_name(B, L, D) +
             (masked ? "_masked" : "");
  c.B = B, c.L = L, c.D = D;
  c.direction = dir;
  c.variant = to_string(weights);
  c.masked = masked;
  c.zero_padded_outputs = true;
  c.gradcheck = L <= 4096;
  c.make_inputs = [=](at::ScalarType dtype, uint64_t seed) {
    Draw draw(seed);
    OpInputs in;
    in.inputs.push_back({"a", draw.randn({B, L, D}, dtype, 2.0), true, 1, true});
    in.inputs.push_back({"v", draw.randn({B, L, D}, dtype), true, 1, true});
    // Small level parameters keep the distance weights where float64 finite differences stay
    // accurate at L = 4096; ones ignores w (no gradient).
    in.inputs.push_back({"w", draw.randn({aib_num_levels(L), D}, dtype, 0.3),
                         weights != AIBWeights::ones, -1, false});
    if (masked) in.mask = aib_mask(B, L);
    return in;
  };
  c.op_args = [=](const std::vector<at::Tensor>& x, const at::Tensor& mask) {
    return std::vector<c10::IValue>{x[0], x[1], x[2], optional(mask), to_string(dir),
                                    to_string(weights)};
  };
  dispatch_both(c);
  c.at_shape = [=](int64_t b, int64_t l, int64_t d) {
    return aib_case(b, l, d, dir, weights, masked);
  };
  return c;
}

}  // namespace

void add_op_cases(std::vector<OpCase>& cases) {
  for (auto dir : {Direction::causal, Direction::bidirectional})
    for (auto w : {AIBWeights::prefix_exp, AIBWeights::exp, AIBWeights::ones})
      for (int64_t L : {1, 2, 3, 17, 64, 1000, 4096})
        for (bool masked : {false, true}) {
          if (masked && L == 1) continue;  // one position: aib_mask pads none
          // D = 20: one full 16-lane float block plus a partial one (and, bidirectional,
          // blocks that end at the D / 2 boundary).
          cases.push_back(aib_case(2, L, 20, dir, w, masked));
          // The configuration the benchmark times: Weird-Net's decoder scan.
          if (dir == Direction::causal && w == AIBWeights::prefix_exp && L == 1000 && !masked) {
            cases.back().benchmarked = true;
            // The reference keeps about two [B, L, D] tensors per level.
            cases.back().bench_bytes = [](Backend b, int64_t B, int64_t L, int64_t D) {
              const int64_t bld = B * L * D * 4;
              return b == Backend::kernel ? 8 * bld : (2 * ops::aib_num_levels(L) + 8) * bld;
            };
          }
        }
  // Path-X length (no finite differences at this size).
  cases.push_back(aib_case(2, 16384, 20, Direction::causal, AIBWeights::prefix_exp, true));
  // An odd number of channel blocks per sequence (or per half), so work items of two blocks
  // and of one block run side by side.
  cases.push_back(aib_case(2, 300, 48, Direction::causal, AIBWeights::prefix_exp, false));
  cases.push_back(aib_case(2, 300, 96, Direction::bidirectional, AIBWeights::exp, true));
  cases.push_back(aib_case(2, 300, 40, Direction::bidirectional, AIBWeights::exp, true));
}

}  // namespace seqmix::mixers::aib
