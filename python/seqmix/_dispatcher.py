"""The layers' ops taken from PyTorch's dispatcher: ``torch.ops.seqmix.<op>`` (impl
``'kernel'``) or ``<op>_reference`` (impl ``'reference'``).

This module imports nothing of the extension: whoever registered the ops (``seqmix.nn``
through ``seqmix._C``, or ``torch.ops.load_library`` on the operators-only library that
``scripts/gpu-check.sh`` builds) can run the layers on them. Each mixer names its ops when
it registers (``MixerEntry.ops``, seqmix/_mixer.py); ``DispatcherOps.add`` makes one member
per op.
"""
import torch


def _caller(name):
    if name.endswith("_reference"):
        # An op that is a reference itself (attention_reference, with its dropout) is called
        # as it is.
        def call(*args):
            return getattr(torch.ops.seqmix, name)(*args)
    else:
        def call(*args):
            # The layers pass impl last: 'kernel' or 'reference'.
            *rest, impl = args
            return getattr(torch.ops.seqmix, name if impl == "kernel" else name + "_reference")(
                *rest)
    call.__name__ = call.__qualname__ = name
    return staticmethod(call)


class DispatcherOps:
    """The layers' ops: torch.ops.seqmix.<op>(*args) for impl 'kernel', <op>_reference for
    'reference' (``op(*args, impl)``); one member per registered op."""

    @classmethod
    def add(cls, name):
        setattr(cls, name, _caller(name))
