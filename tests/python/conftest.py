"""Shared fixtures of the Python package's tests (run by CTest: tests/python/CMakeLists.txt).

Environment (set by CTest): PYTHONPATH=<build>/python, SEQMIX_BIN=<build>/seqmix.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

import seqmix

SEQMIX_BIN = os.environ.get("SEQMIX_BIN", "seqmix")


def cli(*args, check=True):
    """Runs the seqmix command line; returns (exit code, stdout, stderr)."""
    p = subprocess.run([SEQMIX_BIN, *map(str, args)], capture_output=True, text=True,
                       errors="replace")  # a byte-level model may write invalid UTF-8
    if check and p.returncode != 0:
        raise AssertionError(f"seqmix {' '.join(map(str, args))} exited {p.returncode}:\n"
                             f"{p.stdout}\n{p.stderr}")
    return p.returncode, p.stdout, p.stderr


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


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
def cli_run(tmp_path_factory, corpus):
    """A tiny Weird-Net run trained by the command line (6 steps)."""
    out = tmp_path_factory.mktemp("runs") / "wn"
    cli("train", "--model", "weird-net", "--size", "tiny", "--max-len", "32", "--batch-size", "4",
        "--max-steps", "6", "--threads", "1", "--seed", "3", "--data", corpus, "--out", out)
    return out


def run_python(code):
    """Runs `code` in a fresh interpreter (the same one as this, the environment's)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ))
