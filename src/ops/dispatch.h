#pragma once
// What every op's dispatcher registration shares (not a public header): the library's name,
// the conversions between the C++ API (undefined tensor = absent, enums) and the schemas
// (Tensor?, str), the autocast rule, and checks written on symbolic sizes so that the Meta
// implementations run under torch.compile's dynamic shapes too.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SymBool.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "seqmix/ops/common.h"

namespace seqmix::ops::detail {

// An absent optional tensor is the C++ API's undefined tensor, and back.
inline at::Tensor or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}
inline std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// The schema's `str direction`. A wrong value is a ValueError in Python, naming the op.
inline Direction direction_arg(const char* op, c10::string_view s) {
  if (s == "causal") return Direction::causal;
  if (s == "bidirectional") return Direction::bidirectional;
  TORCH_CHECK_VALUE(false, op, ": direction must be 'causal' or 'bidirectional', got '",
                    std::string(s), "'");
}

// The typed handle of seqmix::<name>, looked up once per call site.
template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// A size as a plain integer, for ATen code (the references) whose loops or FFT lengths depend
// on it: under torch.compile a guard, specialising the graph on it.
inline int64_t concrete(const c10::SymInt& s) { return s.guard_int(__FILE__, __LINE__); }

// A defined `mask` must be bool [B, L]; the message starts with `fn`. Undefined: no mask.
inline void check_padding_mask(const char* fn, const at::Tensor& mask, const c10::SymInt& B,
                               const c10::SymInt& L) {
  if (!mask.defined()) return;
  TORCH_CHECK(mask.scalar_type() == at::kBool, fn, ": mask must be bool, got ",
              mask.scalar_type());
  TORCH_CHECK(mask.dim() == 2, fn, ": mask must be [B, L] = [", B, ", ", L, "], got ",
              mask.sym_sizes());
  TORCH_SYM_CHECK(mask.sym_size(0).sym_eq(B).sym_and(mask.sym_size(1).sym_eq(L)), fn,
                  ": mask must be [B, L] = [", B, ", ", L, "], got ", mask.sym_sizes());
}

// Two tensors of one shape (symbolic or not).
inline c10::SymBool same_sizes(const at::Tensor& x, const at::Tensor& y) {
  if (x.dim() != y.dim()) return c10::SymBool(false);
  c10::SymBool same(true);
  for (int64_t d = 0; d < x.dim(); ++d) same = same.sym_and(x.sym_size(d).sym_eq(y.sym_size(d)));
  return same;
}

}  // namespace seqmix::ops::detail
