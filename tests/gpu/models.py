"""What the GPU check's scripts share: the ops (from the operators-only library or the
installed package), seqmix's models bound to them or written in plain PyTorch, their
configurations, and a byte-level text corpus from the repository itself.

The [model] sections are those ``seqmix.build(preset, size=...)`` resolves (the CLI's
presets, src/models/presets.cpp): tests/python/test_gpu_scripts.py checks that they still
are. They are written out here because the GPU machine builds the operators alone, not the
C++ library that holds the presets.
"""
import glob
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# Last: a seqmix on the path already (installed, or PYTHONPATH) comes first; the source
# tree's python/ serves where there is none (the GPU machine, with --lib).
sys.path.append(os.path.join(ROOT, "python"))

_MINI = {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 512, "max_len": 256}

# preset -> mixers of the [model] section (Weird-Net: Structure B; Weird-Net-A: Structure A;
# the Transformer: self-attention in every layer).
MIXERS = {"weird-net": ["aib", "attention"], "weird-net-a": ["aib"],
          "transformer": ["attention"]}


def model_config(preset, max_len=None, d_model=None, n_layers=None, n_heads=None,
                 d_ff=None):
    """The [model] section of `preset` at size mini, with byte-level vocabulary (256)."""
    c = dict(_MINI)
    for key, value in (("max_len", max_len), ("d_model", d_model), ("n_layers", n_layers),
                       ("n_heads", n_heads), ("d_ff", d_ff)):
        if value is not None:
            c[key] = value
    c.update(vocab_size=256, causal=True, mixers=list(MIXERS[preset]))
    return c


def load_ops(lib):
    """Registers torch.ops.seqmix.*: from `lib` (libseqmix_ops.so) or the installed package."""
    if lib:
        torch.ops.load_library(lib)
    else:
        import seqmix.nn  # noqa: F401


def seqmix_classes():
    """seqmix's layers and models on the dispatcher's ops (the fused kernels)."""
    from seqmix import _layers
    from seqmix._dispatcher import DispatcherOps
    return _layers.bind(DispatcherOps, "seqmix_gpu_check")


class UserOps:
    """What a PyTorch user writes for the same models: the papers' algorithms in plain
    PyTorch (seqmix._torch_ops, the ops of seqmix.reference: Algorithm 1's shift-and-add
    levels, the CES FFT form, the Extractor's FFT convolution) and attention through
    F.scaled_dot_product_attention."""

    @staticmethod
    def aib_scan(a, v, w, mask, direction, weights, impl):
        from seqmix import _torch_ops
        return _torch_ops.aib_scan(a, v, w, mask, direction, weights)

    @staticmethod
    def ces_scan(x, mu, c, mask, direction, impl):
        from seqmix import _torch_ops
        return _torch_ops.ces_scan(x, mu, c, mask, direction)

    @staticmethod
    def attention(q, k, v, mask, direction, impl):
        from seqmix import _torch_ops
        if mask is None:
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=direction == "causal")
        return _torch_ops.attention(q, k, v, mask, direction)

    @staticmethod
    def attention_reference(q, k, v, mask, direction, dropout):
        from seqmix import _torch_ops
        return _torch_ops.attention_reference(q, k, v, mask, direction, dropout)

    @staticmethod
    def extractor_conv(x, w, impl):
        from seqmix import _torch_ops
        return _torch_ops.extractor_conv(x, w)

    @staticmethod
    def causal_mean(x, window, mask, impl):
        from seqmix import _torch_ops
        return _torch_ops.causal_mean(x, window, mask)


def pytorch_classes():
    """The same models on UserOps."""
    from seqmix import _layers
    return _layers.bind(UserOps, "seqmix_gpu_check_user")


def corpus():
    """The repository's own prose (README.md, CHANGELOG.md, docs/*.md) as bytes: real text
    that travels with the working tree."""
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
    paths += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    data = b"".join(open(p, "rb").read() for p in paths if os.path.exists(p))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batch(data, step, batch_size, length, seed):
    """Batch `step`: a function of the seed and the step alone (as the trainer's batches)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, data.numel() - length - 1, (batch_size,), generator=g)
    rows = torch.stack([data[s:s + length + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]
