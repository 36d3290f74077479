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

There is one implementation of every layer, the C++ one; nothing here recomputes it. What
PyTorch does by replacing a module's tensors or calling its Python submodules therefore does
not reach the C++ forward, and is refused or unsupported: assigning a new tensor or module to
a name the C++ module owns raises AttributeError (copy into it instead:
``with torch.no_grad(): m.w.copy_(t)``); ``torch.nn.utils.stateless.functional_call``,
parametrizations such as ``weight_norm``, and forward hooks on submodules of a seqmix layer
(hooks on the layer itself work) do not apply.
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

    def __setattr__(self, name, value):
        # A new tensor or module under a C++-owned name would be seen by Python (state_dict,
        # optimisers) but never by the C++ forward, which keeps reading its own.
        owned = self.__dict__.get("_parameters", {}), self.__dict__.get("_buffers", {}), \
            self.__dict__.get("_modules", {})
        if "_cpp" in self.__dict__ and any(name in d for d in owned):
            raise AttributeError(
                f"cannot replace '{name}' of a seqmix {self._cpp.type_name}: the C++ module "
                f"reads its own tensors; copy into it instead (with torch.no_grad(): "
                f"module.{name}.copy_(value))")
        super().__setattr__(name, value)

    # A C++ ModuleList's children are named 0, 1, ...: index and iterate them as in PyTorch.
    def __getitem__(self, index):
        children = list(self._modules.values())
        if isinstance(index, slice):
            raise TypeError("seqmix module lists cannot be sliced; index them one by one")
        return children[index]

    def __len__(self):
        return len(self._modules)

    def __bool__(self):  # a module is true whatever its number of children
        return True

    def __iter__(self):
        return iter(self._modules.values())

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
