"""seqmix's mixers, one module each (internal; users import seqmix.nn or seqmix.reference).

Each module holds one mixer's Python half: its layer classes, its ops in plain PyTorch and
its ``register_mixer`` call (seqmix/_mixer.py). ``seqmix._mixer.mixers()`` imports every
module here, so adding a mixer adds a module and edits no list.
"""
