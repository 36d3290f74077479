"""The layers' ops taken from PyTorch's dispatcher: ``torch.ops.seqmix.<op>`` (impl
``'kernel'``) or ``<op>_reference`` (impl ``'reference'``).

This module imports nothing of the extension: whoever registered the ops (``seqmix.nn``
through ``seqmix._C``, or ``torch.ops.load_library`` on the operators-only library that
``scripts/gpu-check.sh`` builds) can bind the layers to them with
``seqmix._layers.bind(DispatcherOps, module_name)``.
"""
import torch


def _op(name, impl):
    return getattr(torch.ops.seqmix, name if impl == "kernel" else name + "_reference")


class DispatcherOps:
    """The layers' ops: torch.ops.seqmix.<op> (impl 'kernel') or <op>_reference."""

    @staticmethod
    def aib_scan(a, v, w, mask, direction, weights, impl):
        return _op("aib_scan", impl)(a, v, w, mask, direction, weights)

    @staticmethod
    def ces_scan(x, mu, c, mask, direction, impl):
        return _op("ces_scan", impl)(x, mu, c, mask, direction)

    @staticmethod
    def attention(q, k, v, mask, direction, impl):
        return _op("attention", impl)(q, k, v, mask, direction)

    @staticmethod
    def attention_reference(q, k, v, mask, direction, dropout):
        return torch.ops.seqmix.attention_reference(q, k, v, mask, direction, dropout)

    @staticmethod
    def extractor_conv(x, w, impl):
        return _op("extractor_conv", impl)(x, w)

    @staticmethod
    def causal_mean(x, window, mask, impl):
        return _op("causal_mean", impl)(x, window, mask)
