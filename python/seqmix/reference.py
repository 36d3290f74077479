"""seqmix's layers and models in plain PyTorch, without the C++ extension.

Subclasses of ``seqmix.nn``'s classes (every registered mixer's layers, ``FeedForward``,
``Block``, ``SequenceModel``), with the same parameter names, shapes and initialisation, so
they load the same state dicts, but their sequence mixing is the papers' algorithms written
in torch functions (each mixer's module of seqmix/mixers/, gathered in seqmix/_torch_ops.py:
Weird-Net's Algorithms 1-2, ETSMLP's FFT form, the Extractor's convolution, softmax
attention): this module imports nothing of seqmix's C++ and runs
wherever PyTorch runs. Its logits match ``seqmix.nn``'s to 1e-5 (tests/python/
test_reference.py); it is also the baseline ``python -m seqmix.bench`` times, eager and
under ``torch.compile``.

``from_pretrained(dir)`` reads a model that ``save_pretrained`` or ``seqmix export --format
hf`` wrote (config.json + model.safetensors) into a ``SequenceModel`` of this module.

Example::

    import torch, seqmix.reference
    model = seqmix.reference.from_pretrained("wn-hf")       # no extension needed
    logits = model(torch.tensor([[72, 101, 108, 108, 111]]))
"""
from . import _layers, _torch_ops
from ._mixer import DecodingState
from ._pretrained import read_pretrained

_CLASSES = _layers.bind(_torch_ops, __name__)
globals().update(_CLASSES)
__all__ = sorted(_CLASSES) + ["DecodingState", "from_pretrained"]


def from_pretrained(path):
    """The model in a Hugging Face-layout folder (config.json, model.safetensors) as a
    ``seqmix.reference.SequenceModel`` in eval mode; its full configuration is
    ``model.seqmix_config`` (a dict of sections). Raises FileNotFoundError / ValueError
    naming the file and what is wrong (missing or extra tensors, shapes, format)."""
    config, state = read_pretrained(path)
    model = _CLASSES["SequenceModel"](config["model"])
    _load_strict(model, state, path)
    model.seqmix_config = config
    return model.eval()


def _load_strict(model, state, path):
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own))
    if missing or extra:
        raise ValueError(f"{path}: model.safetensors does not fit the configuration: "
                         f"missing {missing[:5]}, unexpected {extra[:5]}")
    for name, t in state.items():
        if tuple(t.shape) != tuple(own[name].shape):
            raise ValueError(f"{path}: tensor {name} has shape {list(t.shape)}, the model "
                             f"needs {list(own[name].shape)}")
        if t.is_floating_point() != own[name].is_floating_point():
            raise ValueError(f"{path}: tensor {name} is {t.dtype}, the model needs "
                             f"{own[name].dtype}")
    model.load_state_dict(state, strict=True)
