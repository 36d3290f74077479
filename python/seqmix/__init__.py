"""seqmix: sub-quadratic sequence models for PyTorch -- AIB (Weird) attention of Moss,
AIB-Net and Weird-Net, the Extractor, the complex exponential smoothing (CES) of ETSMLP, and
the softmax Transformer they are measured against -- on fused C++ kernels registered as
PyTorch operators (``torch.ops.seqmix.*``).

Entry points::

    import seqmix            # build, load, train, from_pretrained, Model: whole models
    import seqmix.nn         # AIBAttention, SelfAttention, CES, ESMLP, Extractor, Block, ...
    import seqmix.ops        # aib_scan, ces_scan, attention, extractor_conv (autograd)
    import seqmix.reference  # the same layers and models in plain PyTorch (no extension)
    import seqmix.hf         # transformers' AutoConfig / AutoModelForCausalLM (optional)

Models and layers are ordinary ``torch.nn.Module``s that own their parameters; a model
saves as a run folder the ``seqmix`` command line evaluates, generates from and trains
further (``Model.save``), or in the Hugging Face layout (``Model.save_pretrained``).

The names below load the extension when first used, so ``import seqmix.reference`` works
where the extension is not built.
"""
import importlib
from importlib import metadata as _metadata

__all__ = ["build", "load", "train", "export", "from_pretrained", "Model", "Tokenizer",
           "__version__"]

_API = {"build", "load", "train", "export", "from_pretrained", "Model", "Tokenizer"}


def __getattr__(name):
    if name in _API:
        return getattr(importlib.import_module("._api", __name__), name)
    if name == "__version__":
        try:
            return _metadata.version("seqmix")
        except _metadata.PackageNotFoundError:  # a build tree on PYTHONPATH, not installed
            return importlib.import_module("._ext", __name__)._C.__version__
    if name in ("nn", "ops", "reference", "hf", "bench", "bench_anchors"):
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'seqmix' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _API | {"__version__"})
