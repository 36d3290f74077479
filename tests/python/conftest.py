"""Shared fixtures of the Python package's tests (run by CTest: python/CMakeLists.txt).

Environment (set by CTest): PYTHONPATH=<build>/python.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

import seqmix


def registry_layers():
    """(id, factory) for every mixer of the Python registry (seqmix/_mixer.py), in each form
    it has (causal; bidirectional unless causal only), built as the model builds it from a
    small [model] section: the tests that walk the mixers loop over this, so a new mixer is
    covered without a list to edit."""
    import seqmix.nn  # noqa: F401  (loads the extension and checks it against the registry)
    from seqmix import _mixer
    out = []
    for entry in _mixer.mixers():
        for causal in (True,) if entry.causal_only else (True, False):
            model = {"d_model": 8, "max_len": 32, "n_layers": 1, "n_heads": 2, "d_ff": 12,
                     "causal": causal}

            def make(entry=entry, model=model):
                return entry.build(_mixer.BASE_FAMILY, model, {}, {})[0]

            out.append((f"{entry.name}-{'causal' if causal else 'bidirectional'}", make))
    return out

@pytest.fixture(autouse=True)
def _threads():
    # Small shapes: one thread keeps results independent of the machine's core count.
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A folder corpus of ten files: the last file is the held-out split (byte_corpus.h)."""
    root = tmp_path_factory.mktemp("corpus") / "text"
    root.mkdir()
    words = ("the quick brown fox jumps over the lazy dog while seven wizards quietly "
             "hex a jumbled box of liquor jugs and ").split()
    for i in range(10):
        lines = [" ".join(words[(i + j) % len(words):] + words[:(i + j) % len(words)])
                 for j in range(12)]
        (root / f"part{i:02d}.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, corpus):
    """A tiny Weird-Net run trained by seqmix.train (6 steps)."""
    out = tmp_path_factory.mktemp("runs") / "wn"
    seqmix.train(out, "weird-net", "tiny", max_len=32,
                 **{"data.source": str(corpus), "train.batch_size": 4, "train.max_steps": 6,
                    "train.threads": 1, "train.seed": 3})
    return out


def train_overrides(corpus):
    """A 12-step tiny run on `corpus`, logging every step and evaluating only at the end."""
    return {"data.source": str(corpus), "max_len": 32, "train.batch_size": 8,
            "train.max_steps": 12, "train.threads": 1, "train.seed": 3, "dropout": 0.0,
            "train.log_interval": 1, "train.eval_interval": 0}


def train_losses(run):
    """{step: training loss} from a run folder's metrics.jsonl."""
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    return {r["step"]: r["loss"] for r in rows if r.get("split") == "train"}


def run_python(code):
    """Runs `code` in a fresh interpreter (the same one as this, the environment's)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ))
