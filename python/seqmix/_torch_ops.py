"""seqmix's sequence-mixing ops in plain PyTorch, gathered from every mixer's module
(seqmix/mixers/<name>.py): the papers' algorithms written with torch
functions only, as mamba's ``selective_scan_ref`` and flash-linear-attention's ``naive.py``
are. ``seqmix.reference`` runs its layers on these, so a seqmix model runs wherever PyTorch
runs, without the C++ extension; the extension's ops (``torch.ops.seqmix.*``) compute the
same functions and are tested against them (tests/python/test_reference.py).

Every function takes bfloat16 activations with float32 parameters (CPU autocast) by
computing in float32 and rounding the result once, as the C++ ops do. ``impl`` is accepted
for the layers' sake and ignored: there is one implementation here.
"""
from ._mixer import mixers as _mixers

for _entry in _mixers():
    for _fn in _entry.torch_ops:
        globals()[_fn.__name__] = _fn
del _entry, _fn
