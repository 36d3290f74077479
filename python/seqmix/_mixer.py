"""What every mixer's Python half builds on (internal): argument checks, ``valid_mask``,
``DecodingState``, the ``Mixer`` base class, the plain-PyTorch ops' bfloat16 helpers, and the
Python registry of mixers that ``seqmix.nn``, ``seqmix.reference``, ``seqmix.ops`` and the
model read.

A mixer's Python half is one module of ``seqmix/mixers/`` (python/seqmix/mixers/<name>.py):
its layer classes, its plain-PyTorch ops (as flash-linear-attention keeps ``naive.py``
beside its kernels) and one ``register_mixer(MixerEntry(...))`` call. ``mixers()`` imports
every module of that folder, so a new module is found without a list to edit; its name,
section and keys are checked against the C++ registry (``seqmix._C.mixers()``) when the
extension loads (``seqmix.nn``).
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ._dispatcher import DispatcherOps

_IMPLS = ("kernel", "reference")


# ---- argument checks ------------------------------------------------------------------------

def _positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def _flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def _choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def _probability(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name}: expected a probability in [0, 1), got {value!r}")
    return float(value)


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def valid_mask(x: torch.Tensor, mask: Optional[torch.Tensor],
               key_padding_mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The padding mask as seqmix's ops take it: [B, L] bool, True = valid, or None.

    ``mask`` is seqmix's (True = valid), ``key_padding_mask`` PyTorch's (True = pad);
    ``x`` is [B, L, ...]. Raises ValueError for both at once, a non-bool dtype (a float
    mask would be ambiguous) or a shape other than [B, L]; TypeError for a non-tensor."""
    if mask is not None and key_padding_mask is not None:
        raise ValueError("mask (True = valid) and key_padding_mask (True = padding) are the "
                         "same information in opposite conventions; pass one of them")
    name, value = ("mask", mask) if mask is not None else ("key_padding_mask", key_padding_mask)
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a bool tensor [B, L] or None, got "
                        f"{type(value).__name__}")
    meaning = "True = valid position" if name == "mask" else "True = padding"
    if value.dtype != torch.bool:
        raise ValueError(f"{name}: expected a bool tensor [B, L] ({meaning}), got dtype "
                         f"{value.dtype}")
    if value.dim() != 2 or tuple(value.shape) != tuple(x.shape[:2]):
        raise ValueError(f"{name}: expected shape [B, L] = {list(x.shape[:2])} ({meaning}), "
                         f"got {list(value.shape)}")
    return value if name == "mask" else value.logical_not()


def _check_x(layer, x, d_model):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{layer}: x must be a tensor [B, L, {d_model}], got "
                        f"{type(x).__name__}")
    if x.dim() != 3 or x.shape[2] != d_model:
        raise ValueError(f"{layer}: x must be [B, L, {d_model}], got {list(x.shape)}")
    if not x.is_floating_point():
        # Layers take embeddings, not token ids: an integer x would reach a matmul's dtype
        # error, which names neither the layer nor the argument.
        raise TypeError(f"{layer}: x must be a floating-point tensor (embeddings), got "
                        f"{x.dtype}")


def _check_length(layer, x, max_len, what=""):
    # Learned per-position parameters (AIB levels, the Extractor's lag matrices) end there.
    if x.shape[1] > max_len:
        raise ValueError(f"{layer}: sequence length {x.shape[1]} exceeds max_len "
                         f"{max_len}{what}")


def _check_step(layer, x_t, d_model, state, kind):
    if not isinstance(x_t, torch.Tensor) or x_t.dim() != 2 or x_t.shape[1] != d_model:
        shape = list(x_t.shape) if isinstance(x_t, torch.Tensor) else type(x_t).__name__
        raise ValueError(f"{layer}.step: x_t must be [B, {d_model}], got {shape}")
    if not x_t.is_floating_point():
        raise TypeError(f"{layer}.step: x_t must be a floating-point tensor, got {x_t.dtype}")
    if not isinstance(state, DecodingState) or state.kind != kind:
        raise ValueError(f"{layer}.step: state was not made by this layer's init_state")
    if state.batch != x_t.shape[0]:
        raise ValueError(f"{layer}.step: state is for batch {state.batch}, x_t has "
                         f"{x_t.shape[0]} rows")


class DecodingState:
    """One mixer's decoding state: ``pos`` (tokens consumed so far), ``batch`` and the
    mixer's caches in ``tensors`` (each layer documents its own). Made by ``init_state``,
    advanced by ``step``. It holds activations, and values derived from the weights when
    ``init_state`` ran (AIB attention's distance weights): change the weights, make a new
    state."""

    def __init__(self, kind: str, batch: int, tensors: List[torch.Tensor]):
        self.kind = kind
        self.batch = batch
        self.tensors = tensors
        self.pos = 0

    def __repr__(self):
        shapes = ", ".join(repr(t) if isinstance(t, DecodingState) else str(list(t.shape))
                           for t in self.tensors)
        return f"DecodingState({self.kind}, pos={self.pos}, tensors=[{shapes}])"


def _linear_init(weight, std):
    nn.init.normal_(weight, 0.0, std)


def _out_std(d_model, n_layers):
    # Weird-Net Sec. III.G's output-projection rule (as the C++ layers): a stack of N layers
    # adds 2N residual branches.
    return math.sqrt(max(1.0 - 2.0 / d_model, 1e-3) / (2.0 * n_layers * d_model))


# ---- the plain-PyTorch ops' helpers ------------------------------------------------------

def float32_compute():
    """Autocast off: a widened bfloat16 computation stays in float32 (under CPU autocast a
    matmul would otherwise cast back to bfloat16), as the C++ ops' AutocastOff guard."""
    return torch.autocast("cpu", enabled=False)


def widen(t):
    return t.float() if t is not None and t.dtype == torch.bfloat16 else t


# ---- the mixer base class --------------------------------------------------------------------

class Mixer(nn.Module):
    """A sequence mixer: x [B, L, D] -> [B, L, D]; causal ones also decode step by step."""

    # The ops the layer mixes with: PyTorch's dispatcher (seqmix.nn), or the plain-PyTorch
    # ones for seqmix.reference's subclasses (_layers.bind).
    _ops = DispatcherOps
    # The classes the layer builds its parts from (ESMLP its CES): this family's.
    _family: Dict[str, type] = {}

    def init_state(self, batch: int) -> DecodingState:
        """An empty decoding state for ``batch`` sequences (``DecodingState``).
        Raises RuntimeError for a bidirectional (encoder) layer."""
        _positive("batch", batch)
        if not self.causal:
            raise RuntimeError(f"{type(self).__name__}: a bidirectional (encoder) layer cannot "
                               "decode step by step")
        return self._init_state(batch)


# ---- the registry ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MixerEntry:
    """One mixer as the Python package knows it (the C++ registry's row:
    include/seqmix/models/mixer_registry.h).

    name: its name in ``model.mixers``. section: its ``[model.<section>]`` table. keys: that
    table's keys. build(family, model, section, f) -> (mixer, has_ffn): layer from the
    [model] configuration (a dict), its section's table, and the factory keywords ``f``
    (device, dtype), with the classes of ``family`` (a dict: seqmix.nn's or
    seqmix.reference's). classes: its public layer classes. functions: its public helper
    functions (``seqmix.nn`` exports them). ops: its ops in PyTorch's dispatcher
    (``torch.ops.seqmix.<op>``; the layers call them as ``self._ops.<op>(..., impl)``).
    torch_ops: the same ops in plain PyTorch (``seqmix.reference``'s layers call these).
    causal_only: it has no bidirectional form."""

    name: str
    section: str
    keys: frozenset
    build: Callable
    classes: Tuple[type, ...]
    functions: Tuple[Callable, ...] = ()
    ops: Tuple[str, ...] = ()
    torch_ops: Tuple[Callable, ...] = ()
    causal_only: bool = False


_REGISTRY: Dict[str, MixerEntry] = {}
# seqmix.nn's classes by name: the registered layers plus the block and model (_layers.py).
BASE_FAMILY: Dict[str, type] = {}
Mixer._family = BASE_FAMILY
_LOADED = False


def register_mixer(entry: MixerEntry) -> MixerEntry:
    """Adds a mixer (called once by its module of seqmix/mixers/); its ops join
    ``DispatcherOps``. ValueError for a name already registered."""
    if entry.name in _REGISTRY:
        raise ValueError(f"register_mixer: mixer {entry.name!r} is registered already")
    _REGISTRY[entry.name] = entry
    for op in entry.ops:
        DispatcherOps.add(op)
    for cls in entry.classes:
        BASE_FAMILY[cls.__name__] = cls
        cls._family = BASE_FAMILY
    return entry


def mixers() -> List[MixerEntry]:
    """Every mixer of seqmix/mixers/, in the order of its modules' names."""
    global _LOADED
    if not _LOADED:
        from . import mixers as package
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{info.name}")
        _LOADED = True
    return list(_REGISTRY.values())


def find_mixer(name) -> MixerEntry:
    """The registered mixer ``name``. ValueError naming the registered ones otherwise."""
    for entry in mixers():
        if entry.name == name:
            return entry
    names = [e.name for e in mixers()]
    raise ValueError(f"model.mixers: unknown mixer {name!r} (expected "
                     f"{', '.join(names[:-1])} or {names[-1]})")


def check_against(cpp_rows) -> None:
    """RuntimeError unless the Python registry has the C++ registry's mixers, sections and
    section keys (``cpp_rows``: ``seqmix._C.mixers()``): a mixer with a C++ half and no
    Python half (or the reverse) is named rather than met as "unknown mixer" later."""
    py = {e.name: e for e in mixers()}
    for row in cpp_rows:
        entry = py.pop(row["name"], None)
        if entry is None:
            raise RuntimeError(f"mixer {row['name']!r} is in the C++ registry but has no Python "
                               "layer (a module of seqmix/mixers/ that calls register_mixer)")
        if entry.section != row["section"] or entry.keys != frozenset(row["keys"]):
            raise RuntimeError(
                f"mixer {row['name']!r}: the Python layer reads [model.{entry.section}] "
                f"{sorted(entry.keys)}, the C++ registry [model.{row['section']}] "
                f"{sorted(row['keys'])}")
    if py:
        raise RuntimeError(f"mixer {sorted(py)[0]!r} has a Python layer but is not in the C++ "
                           "registry (SEQMIX_MIXERS in CMakeLists.txt)")
