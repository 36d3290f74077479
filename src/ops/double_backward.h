#pragma once
// Second-order gradients of the hand-written kernels. A kernel's backward computes numbers,
// not a graph: under create_graph=True (gradient penalties, Hessian-vector products,
// gradgradcheck) its gradients would be constants and every second derivative silently 0.
// There, each kernel's backward instead differentiates its ATen reference -- the same
// function, which autograd can differentiate as often as asked -- at the saved inputs, so
// the gradients it returns carry a graph back to those inputs and to the incoming gradient.
#include <torch/autograd.h>

#include <functional>
#include <vector>

namespace seqmix::ops::detail {

// True inside a backward pass that must itself be differentiable (create_graph=True).
inline bool differentiable_backward() { return at::GradMode::is_enabled(); }

// The gradients of `reference(inputs)` with respect to each of `inputs` that requires grad
// (undefined for the others), for the output gradient `grad_out`, as differentiable tensors.
// `inputs` are the saved variables of the kernel's forward: they keep their history, so the
// graph built here reaches the original inputs.
inline torch::autograd::tensor_list reference_backward(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& reference,
    const std::vector<at::Tensor>& inputs, const at::Tensor& grad_out) {
  const at::Tensor out = reference(inputs);
  std::vector<at::Tensor> wrt;
  std::vector<size_t> where;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      wrt.push_back(inputs[i]);
      where.push_back(i);
    }
  torch::autograd::tensor_list grads(inputs.size());
  if (wrt.empty() || !out.requires_grad()) return grads;
  const auto g = torch::autograd::grad({out}, wrt, {grad_out.to(out.scalar_type())},
                                       /*retain_graph=*/true, /*create_graph=*/true,
                                       /*allow_unused=*/true);
  for (size_t j = 0; j < where.size(); ++j)
    grads[where[j]] = g[j].defined() ? g[j] : at::zeros_like(inputs[where[j]]);
  return grads;
}

}  // namespace seqmix::ops::detail
