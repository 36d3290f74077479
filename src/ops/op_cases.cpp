// The op-case registry: one family of cases per op, each in its mixer's folder
// (src/mixers/<name>/op_cases.cpp; docs/ARCHITECTURE.md, "Ops").
#include "seqmix/ops/op_cases.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ops/op_case_support.h"

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

namespace detail {

std::string dir_name(Direction d) { return to_string(d); }

std::string shape_name(int64_t B, int64_t L, int64_t D) {
  return "B" + std::to_string(B) + "_L" + std::to_string(L) + "_D" + std::to_string(D);
}

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

c10::IValue optional(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }

void check_shape(const char* op, int64_t B, int64_t L, int64_t D) {
  if (B < 1 || L < 1 || D < 1)
    throw std::invalid_argument(std::string(op) + ": B, L and D must be >= 1, got " +
                                shape_name(B, L, D));
}

}  // namespace detail

namespace {

std::vector<OpCase> build() {
  std::vector<OpCase> cases;
  add_builtin_op_cases(cases);
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
