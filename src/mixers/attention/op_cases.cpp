// The attention op's cases in the op-case registry (ops/op_cases.h): configurations that the
// tests check and `seqmix bench ops` times.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "seqmix/ops/attention.h"
#include "ops/op_case_support.h"

namespace seqmix::mixers::attention {

using namespace ops;
using namespace ops::detail;

namespace {

// The cases call the ops by name; these references link the op's translation units -- and
// with them its registrations in the dispatcher -- into any program that uses the registry.
[[maybe_unused]] const void* const kRegisteredOps[] = {
    reinterpret_cast<const void*>(&ops::attention),
};

// ---- Softmax attention (attention.h): the flash-style kernel against eq. 1 in ATen.

// Valid keys with padding inside and at the end; causal cases also pad the first two
// positions, so queries there see no key at all.
at::Tensor attention_mask(Draw& draw, int64_t B, int64_t L, bool lead) {
  at::Tensor m = draw.rand({B, L}) > 0.3;
  if (L > 1) m.select(1, L - 1).fill_(false);
  m.select(1, L / 2).fill_(true);
  if (lead) m.narrow(1, 0, std::min<int64_t>(L, 2)).fill_(false);
  return m;
}

OpCase attention_case(int64_t B, int64_t H, int64_t L, int64_t dh, Direction dir, bool masked) {
  check_shape("attention", B, L, H * dh);
  OpCase c;
  c.op = "attention";
  c.config = dir_name(dir) + "_B" + std::to_string(B) + "_H" + std::to_string(H) + "_L" +
             std::to_string(L) + "_dh" + std::to_string(dh) + (masked ? "_masked" : "");
  c.B = B, c.L = L, c.D = H * dh;
  c.direction = dir;
  c.masked = masked;
  c.zero_padded_outputs = false;  // padded queries are computed; the layer zeroes them
  c.out_seq_dim = 2;
  c.gradcheck = L <= 130;
  c.make_inputs = [=](at::ScalarType dtype, uint64_t seed) {
    Draw draw(seed);
    OpInputs in;
    // Scores of a few units, as trained models have, so the softmax is not nearly uniform.
    in.inputs.push_back({"q", draw.randn({B, H, L, dh}, dtype, 2.0), true, 2, false});
    in.inputs.push_back({"k", draw.randn({B, H, L, dh}, dtype, 2.0), true, 2, true});
    in.inputs.push_back({"v", draw.randn({B, H, L, dh}, dtype), true, 2, true});
    if (masked) in.mask = attention_mask(draw, B, L, dir == Direction::causal);
    return in;
  };
  c.op_args = [=](const std::vector<at::Tensor>& x, const at::Tensor& mask) {
    return std::vector<c10::IValue>{x[0], x[1], x[2], optional(mask), to_string(dir)};
  };
  dispatch_both(c);
  c.at_shape = [=](int64_t b, int64_t l, int64_t d) {
    if (d % dh)
      throw std::invalid_argument("attention: D = " + std::to_string(d) +
                                  " is not a multiple of the head width " + std::to_string(dh));
    return attention_case(b, d / dh, l, dh, dir, masked);
  };
  return c;
}

}  // namespace

void add_op_cases(std::vector<OpCase>& cases) {
  for (auto dir : {Direction::causal, Direction::bidirectional})
    for (bool masked : {false, true})
      for (int64_t L : {1, 17, 130})
        for (int64_t dh : {16, 5}) {  // the CPU presets' head width, and not a whole vector
          // One bidirectional position is always valid (attention_mask): nothing padded.
          if (masked && L == 1 && dir == Direction::bidirectional) continue;
          cases.push_back(attention_case(2, 3, L, dh, dir, masked));
        }
  // The Pathfinder preset's shape (one sequence) and a paper-size head, several query blocks.
  cases.push_back(attention_case(1, 2, 1024, 16, Direction::bidirectional, true));
  cases.push_back(attention_case(1, 2, 700, 64, Direction::causal, true));
  cases.push_back(attention_case(1, 1, 300, 64, Direction::causal, false));
  cases.back().benchmarked = true;  // GPT-2's head width
  // The reference adds about three [B, H, L, L] float32 score-sized tensors.
  cases.back().bench_bytes = [](Backend b, int64_t B, int64_t L, int64_t D) {
    const int64_t H = std::max<int64_t>(1, D / 64);
    return 10 * B * L * D * 4 + (b == Backend::kernel ? 0 : 3 * B * H * L * L * 4);
  };
  // Query blocks of 32 rows (the block shrinks as L grows).
  cases.push_back(attention_case(1, 1, 4096, 8, Direction::bidirectional, true));
}

}  // namespace seqmix::mixers::attention
