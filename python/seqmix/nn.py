"""seqmix's layers as ordinary ``torch.nn.Module``s on PyTorch operators.

``AIBAttention``, ``SelfAttention``, ``CES``, ``ESMLP``, ``Extractor``, ``CausalMean``,
``FeedForward``, ``Block`` and ``SequenceModel`` own their parameters (``nn.Linear`` and
``nn.Parameter``, with the names and initialisation of the C++ layers, so state dicts load
both ways) and do their sequence mixing with one call each to the ops registered in
PyTorch's dispatcher by the extension: ``torch.ops.seqmix.aib_scan``, ``ces_scan``,
``attention``, ``extractor_conv`` and ``causal_mean`` (``impl='kernel'``, the fused CPU
kernels) or their ``*_reference`` twins (``impl='reference'``). So autograd,
``torch.compile(fullgraph=True)``, ``torch.export``, ``torch.jit.trace``, deepcopy,
pickling, parametrizations, ``functional_call``, hooks and ``.to()`` work as for any module.

Masks: ``mask`` [B, L] bool with True = valid position (seqmix's convention), or
``key_padding_mask`` [B, L] bool with True = padding (``nn.MultiheadAttention``'s); passing
both is a ValueError. Causal mixers decode step by step: ``state = layer.init_state(B)``,
then ``y_t = layer.step(x_t, state)`` (x_t [B, D]), equal to ``forward`` on the prefix.

The classes are defined once: each mixer's in its module of ``seqmix/mixers/`` (for
example ``seqmix.mixers.aib.AIBAttention``), the block and model in ``seqmix/_layers.py``;
this module exports every registered mixer's classes and helper functions (the registry,
``seqmix/_mixer.py``), checked against the C++ registry when the extension loads.
``seqmix.reference`` has subclasses of them on plain-PyTorch ops, for machines without the
extension.

Example::

    import torch, seqmix.nn
    layer = seqmix.nn.AIBAttention(d_model=64, max_len=256)
    y = layer(torch.randn(2, 100, 64))                      # [2, 100, 64]
    pad = torch.zeros(2, 100, dtype=torch.bool); pad[1, 80:] = True
    y = layer(torch.randn(2, 100, 64), key_padding_mask=pad)
"""
from ._ext import _C
from . import _layers, _mixer
from ._mixer import DecodingState

_mixer.check_against(_C.mixers())
_PUBLIC = {cls.__name__: cls for cls in _layers.public_classes()}
_PUBLIC.update({fn.__name__: fn for e in _mixer.mixers() for fn in e.functions})
globals().update(_PUBLIC)
__all__ = sorted(_PUBLIC) + ["DecodingState"]
