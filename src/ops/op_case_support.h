#pragma once
// What every op's family of cases (src/mixers/<name>/op_cases.cpp) builds its cases with:
// seeded draws, names, and calls through the dispatcher. Internal to libseqmix.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

#include "seqmix/ops/op_cases.h"

namespace seqmix::ops::detail {

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

// The direction as a case name spells it ("causal", "bidirectional").
std::string dir_name(Direction d);
// "B2_L17_D20".
std::string shape_name(int64_t B, int64_t L, int64_t D);
// `x` rounded to float32, in `dtype`.
at::Tensor representable(const at::Tensor& x, at::ScalarType dtype);
// Sets the case's kernel and reference: seqmix::<op> and seqmix::<op>_reference called
// through the dispatcher with the case's op_args (options beyond them take their defaults).
void dispatch_both(OpCase& c);
// An optional tensor argument: None when undefined.
c10::IValue optional(const at::Tensor& t);
// @throws std::invalid_argument "<op>: B, L and D must be >= 1, got ..." unless all are.
void check_shape(const char* op, int64_t B, int64_t L, int64_t D);

}  // namespace seqmix::ops::detail
