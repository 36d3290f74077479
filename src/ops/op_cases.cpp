// The op-case registry: one family of cases per op (docs/ARCHITECTURE.md, "Ops").
#include "seqmix/ops/op_cases.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "seqmix/ops/aib_scan.h"
#include "seqmix/ops/attention.h"
#include "seqmix/ops/ces_scan.h"
#include "seqmix/ops/extractor_conv.h"

namespace seqmix::ops {

std::vector<at::Tensor> OpInputs::values() const {
  std::vector<at::Tensor> out;
  out.reserve(inputs.size());
  for (const auto& in : inputs) out.push_back(in.value);
  return out;
}

OpInputs OpInputs::to(at::ScalarType dtype) const {
  OpInputs out = *this;
  for (auto& in : out.inputs) in.value = in.value.detach().to(dtype);
  return out;
}

namespace {

std::string dir_name(Direction d) { return to_string(d); }

std::string shape_name(int64_t B, int64_t L, int64_t D) {
  return "B" + std::to_string(B) + "_L" + std::to_string(L) + "_D" + std::to_string(D);
}

// Draws from one private generator, so cases neither read nor disturb the global seed.
// Values are drawn in float32 whatever the dtype asked: float32 and float64 inputs of one seed
// are then the same numbers (and the same mask), so a float64 run on float32 inputs is their
// exact result.
struct Draw {
  explicit Draw(uint64_t seed) : gen(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  at::Tensor randn(at::IntArrayRef size, at::ScalarType dtype, double scale = 1.0) {
    return (at::randn(size, gen, at::TensorOptions().dtype(at::kFloat)) * scale).to(dtype);
  }
  // Uniform [0, 1) in float64, for derived values (round those with representable()).
  at::Tensor rand(at::IntArrayRef size) {
    return at::rand(size, gen, at::TensorOptions().dtype(at::kFloat)).to(at::kDouble);
  }
  at::Generator gen;
};

// `x` rounded to float32, in `dtype`.
at::Tensor representable(const at::Tensor& x, at::ScalarType dtype) {
  return x.to(at::kFloat).to(dtype);
}

// Calls seqmix::<name> with the case's arguments; options the schema has beyond them take
// their defaults.
at::Tensor call_op(const std::string& name, std::vector<c10::IValue> args) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(("seqmix::" + name).c_str(), "");
  const auto& params = op.schema().arguments();
  for (size_t i = args.size(); i < params.size(); ++i) args.push_back(*params[i].default_value());
  torch::jit::Stack stack(args.begin(), args.end());
  op.callBoxed(&stack);
  return stack.at(0).toTensor();
}

// Sets the case's kernel and reference: its op and the op's reference, through the
// dispatcher, with op_args.
void dispatch_both(OpCase& c) {
  const std::string op = c.op;
  const OpArgsFn args = c.op_args;
  c.kernel = [=](const std::vector<at::Tensor>& x, const at::Tensor& mask) {
    return call_op(op, args(x, mask));
  };
  c.reference = [=](const std::vector<at::Tensor>& x, const at::Tensor& mask) {
    return call_op(op + "_reference", args(x, mask));
  };
}

// The cases call the ops by name; these references link every op's translation unit -- and
// with it its registration in the dispatcher -- into any program that uses the cases.
[[maybe_unused]] const void* const kRegisteredOps[] = {
    reinterpret_cast<const void*>(&aib_scan), reinterpret_cast<const void*>(&ces_scan),
    reinterpret_cast<const void*>(&attention), reinterpret_cast<const void*>(&extractor_conv)};

c10::IValue optional(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }

void check_shape(const char* op, int64_t B, int64_t L, int64_t D) {
  if (B < 1 || L < 1 || D < 1)
    throw std::invalid_argument(std::string(op) + ": B, L and D must be >= 1, got " +
                                shape_name(B, L, D));
}

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

void add_aib_cases(std::vector<OpCase>& cases) {
  for (auto dir : {Direction::causal, Direction::bidirectional})
    for (auto w : {AIBWeights::prefix_exp, AIBWeights::exp, AIBWeights::ones})
      for (int64_t L : {1, 2, 3, 17, 64, 1000, 4096})
        for (bool masked : {false, true}) {
          if (masked && L == 1) continue;  // one position: aib_mask pads none
          // D = 20: one full 16-lane float block plus a partial one (and, bidirectional,
          // blocks that end at the D / 2 boundary).
          cases.push_back(aib_case(2, L, 20, dir, w, masked));
          // The configuration the benchmark times: Weird-Net's decoder scan.
          if (dir == Direction::causal && w == AIBWeights::prefix_exp && L == 1000 && !masked)
            cases.back().benchmarked = true;
        }
  // Path-X length (no finite differences at this size).
  cases.push_back(aib_case(2, 16384, 20, Direction::causal, AIBWeights::prefix_exp, true));
  // An odd number of channel blocks per sequence (or per half), so work items of two blocks
  // and of one block run side by side.
  cases.push_back(aib_case(2, 300, 48, Direction::causal, AIBWeights::prefix_exp, false));
  cases.push_back(aib_case(2, 300, 96, Direction::bidirectional, AIBWeights::exp, true));
  cases.push_back(aib_case(2, 300, 40, Direction::bidirectional, AIBWeights::exp, true));
}

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

void add_ces_cases(std::vector<OpCase>& cases) {
  for (auto dir : {Direction::causal, Direction::bidirectional})
    for (bool normalize : {false, true})
      for (bool masked : {false, true})
        for (int64_t L : {1, 2, 17, 300}) {
          if (masked && L == 1) continue;  // position 0 is always valid: nothing to pad
          // H = 70: one full 64-channel run plus a partial one.
          cases.push_back(ces_case(2, L, 70, dir, normalize, masked));
          if (dir == Direction::causal && !normalize && !masked && L == 300)
            cases.back().benchmarked = true;  // ETSMLP-LM's causal scan
        }
  cases.push_back(ces_case(2, 4096, 20, Direction::causal, true, false));
  cases.push_back(ces_case(2, 1000, 20, Direction::bidirectional, true, true));
}

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

void add_attention_cases(std::vector<OpCase>& cases) {
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
  // Query blocks of 32 rows (the block shrinks as L grows).
  cases.push_back(attention_case(1, 1, 4096, 8, Direction::bidirectional, true));
}

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

void add_extractor_cases(std::vector<OpCase>& cases) {
  cases.push_back(extractor_case(2, 1, 3, 4));
  cases.push_back(extractor_case(2, 7, 3, 8));
  cases.push_back(extractor_case(1, 16, 4, 16));
  cases.push_back(extractor_case(3, 37, 5, 64));
  cases.push_back(extractor_case(2, 128, 16, 128));
  cases.back().benchmarked = true;  // the paper's window (Table 1: l = t = 128)
}

std::vector<OpCase> build() {
  std::vector<OpCase> cases;
  add_aib_cases(cases);
  add_ces_cases(cases);
  add_attention_cases(cases);
  add_extractor_cases(cases);
  return cases;
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = build();
  return cases;
}

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const auto& c : op_cases())
    if (std::find(names.begin(), names.end(), c.op) == names.end()) names.push_back(c.op);
  return names;
}

std::vector<OpCase> op_cases(const std::string& op) {
  std::vector<OpCase> out;
  for (const auto& c : op_cases())
    if (c.op == op) out.push_back(c);
  if (out.empty()) {
    std::string list;
    for (const auto& n : op_names()) list += (list.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown op '" + op + "' (expected one of " + list + ")");
  }
  return out;
}

}  // namespace seqmix::ops
