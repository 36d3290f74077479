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

``seqmix.reference`` has the same classes on plain-PyTorch ops, for machines without the
extension.

Example::

    import torch, seqmix.nn
    layer = seqmix.nn.AIBAttention(d_model=64, max_len=256)
    y = layer(torch.randn(2, 100, 64))                      # [2, 100, 64]
    pad = torch.zeros(2, 100, dtype=torch.bool); pad[1, 80:] = True
    y = layer(torch.randn(2, 100, 64), key_padding_mask=pad)
"""
import torch

from ._ext import _C  # noqa: F401  (loads libseqmix: registers torch.ops.seqmix.*)
from . import _layers
from ._dispatcher import DispatcherOps as _DispatcherOps

__all__ = ["AIBAttention", "SelfAttention", "CES", "ESMLP", "Extractor", "CausalMean",
           "FeedForward", "Block", "SequenceModel", "DecodingState", "ces_coefficients",
           "aib_level_weights", "aib_lag_weights", "aib_num_levels"]


globals().update(_layers.bind(_DispatcherOps, __name__))
DecodingState = _layers.DecodingState
ces_coefficients = _layers.ces_coefficients
aib_level_weights = _layers.aib_level_weights
aib_lag_weights = _layers.aib_lag_weights
aib_num_levels = _layers.aib_num_levels
