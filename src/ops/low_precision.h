#pragma once
// bfloat16 activations (mixed precision: include/seqmix/nn/precision.h). Every op accepts
// them with float32 (or bfloat16) parameters, computes in float32 and rounds its output to
// bfloat16 once. The conversions are ATen ops, so autograd carries the gradients across
// them: activation gradients come back in bfloat16, parameter gradients in their own dtype.
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace seqmix::ops::detail {

inline bool is_bf16(const at::Tensor& t) {
  return t.defined() && t.scalar_type() == at::kBFloat16;
}

// A float32 copy of a bfloat16 tensor; any other tensor as it is.
inline at::Tensor widen(const at::Tensor& t) { return is_bf16(t) ? t.to(at::kFloat) : t; }

// Whether a parameter of dtype `p` may go with activations of dtype `x`: the same dtype, or,
// for bfloat16 activations, float32 (autocast's master weights).
inline bool param_dtype_fits(at::ScalarType p, at::ScalarType x) {
  return p == x || (x == at::kBFloat16 && p == at::kFloat);
}

// Switches LibTorch's autocast off for the op's own ATen calls (PyTorch's
// custom_fwd(cast_inputs=torch.float32)): an op computes in the dtype its contract names,
// whatever autocast would do to the matrix products inside it.
class AutocastOff {
 public:
  AutocastOff() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

// The raw bits of a bfloat16 tensor's storage, as the kernels in cpu/ take them.
inline const uint16_t* bf16_bits(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
inline uint16_t* bf16_bits(at::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

inline bool activation_dtype_ok(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16;
}

}  // namespace seqmix::ops::detail
