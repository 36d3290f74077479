"""torch.nn.Module views of seqmix's C++ modules (internal; users see seqmix.nn and
seqmix.Model).

A `CppModule` holds a handle on a C++ module of libseqmix and registers that module's own
parameter and buffer tensors -- the same tensor objects, not copies -- in the Python module
tree, named as the C++ module names them. So:

* ``parameters()`` / ``state_dict()`` / ``load_state_dict()`` act on exactly the tensors the
  C++ forward reads, and gradients the C++ backward computes land in their ``.grad``;
* ``.to(dtype)`` / ``.double()`` / ``.float()`` change those tensors in place (``.data``), so
  the C++ module sees the new dtype; only the CPU is supported (LibTorch here has no CUDA);
* ``train()`` / ``eval()`` switch the C++ module too (dropout, batch norm).

There is one implementation of every layer, the C++ one; nothing here recomputes it.
"""
import torch

from . import _C


def _as_parameter(tensor):
    # The C++ tensor's own Python object, given the Parameter class, so that code which
    # checks isinstance(p, nn.Parameter) treats it as one. The object is still the C++
    # module's tensor: no copy is made and autograd identity is kept.
    if not isinstance(tensor, torch.nn.Parameter):
        tensor.__class__ = torch.nn.Parameter
    return tensor


class CppModule(torch.nn.Module):
    """A torch.nn.Module whose parameters, buffers and children are those of a C++ module.

    Subclasses give ``forward``; ``_cpp`` is the handle passed to the C++ calls.
    """

    def __init__(self, cpp):
        super().__init__()
        self._cpp = cpp
        self._attach()

    def _attach(self):
        """(Re)registers the C++ module's tensors and children under their C++ names."""
        self._parameters.clear()
        self._buffers.clear()
        self._modules.clear()
        for name, tensor in self._cpp.named_parameters():
            self._parameters[name] = _as_parameter(tensor)
        for name, tensor in self._cpp.named_buffers():
            self._buffers[name] = tensor
        for name, child in self._cpp.named_children():
            self._modules[name] = CppModule(child)
        self.training = self._cpp.training

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._cpp.type_name} is a part of a seqmix layer; call the layer that holds it")

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError(f"train(mode): expected a bool, got {mode!r}")
        self._cpp.train(mode)
        return super().train(mode)

    def _apply(self, fn):
        # torch.nn.Module._apply would put new buffer tensors into the Python dict only,
        # which the C++ module would never see: convert every tensor in place instead.
        for module in self.modules():
            if not isinstance(module, CppModule):
                continue
            for param in module._parameters.values():
                with torch.no_grad():
                    param.data = fn(param.data)
                if param.grad is not None:
                    param.grad.data = fn(param.grad.data)
            for buf in module._buffers.values():
                buf.data = fn(buf.data)
        return self

    def __deepcopy__(self, memo):
        raise TypeError(
            f"{type(self).__name__} shares its tensors with a C++ module and cannot be deep-"
            "copied; build a new one and load_state_dict(old.state_dict()) into it")

    def __getstate__(self):
        raise TypeError(
            f"{type(self).__name__} cannot be pickled (torch.save(module)); save its "
            "state_dict() instead, or a whole seqmix model with Model.save(run_dir)")

    def extra_repr(self):
        # The C++ module's own description: its type and options.
        return repr(self._cpp)
