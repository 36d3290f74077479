"""seqmix.train: the command line's trainer from Python, alone and as data-parallel workers
started the way torchrun starts them (RANK, WORLD_SIZE, ... in the environment)."""
import json
import os
import socket
import subprocess
import sys

import pytest

import seqmix
from conftest import train_losses, train_overrides


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_python_workers_train_what_one_trains(tmp_path, corpus):
    # Two interpreters, launched as torchrun launches them, call seqmix.train alike.
    port = _free_port()
    code = ("import seqmix, sys, json; "
            f"r = seqmix.train({str(tmp_path / 'dp')!r}, 'weird-net', 'tiny', "
            f"**{train_overrides(corpus)!r}); print(json.dumps(r))")
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["world_size"] == 2
    # The global batch of 8 split 4 + 4 trains the model one process trains on 8.
    seqmix.train(tmp_path / "one", "weird-net", "tiny", **train_overrides(corpus))
    a, b = train_losses(tmp_path / "one"), train_losses(tmp_path / "dp")
    assert a.keys() == b.keys()
    for step in a:
        assert abs(a[step] - b[step]) <= 1e-5 * abs(a[step]), (step, a[step], b[step])


def test_bad_train_arguments_raise(tmp_path, corpus):
    with pytest.raises(TypeError, match="resume"):
        seqmix.train(tmp_path / "x", "weird-net", resume="yes")
    with pytest.raises(ValueError, match="dist_timeout"):
        seqmix.train(tmp_path / "x", "weird-net", dist_timeout=0)
    with pytest.raises((ValueError, RuntimeError), match="d_modle"):
        seqmix.train(tmp_path / "x", "weird-net", "tiny", d_modle=3)
    assert not os.path.exists(tmp_path / "x" / "checkpoint.pt")


def test_device_arguments(tmp_path, corpus):
    # A device is 'cpu', 'cuda' or 'cuda:N' (a str or torch.device), checked before anything
    # is built or written.
    import torch
    for bad in ("tpu", "cuda:x", "cpu:1", "", "cuda:-1"):
        with pytest.raises(ValueError, match="must be 'cpu', 'cuda' or 'cuda:N'"):
            seqmix.build("weird-net", "tiny", device=bad)
        with pytest.raises(ValueError, match="must be 'cpu', 'cuda' or 'cuda:N'"):
            seqmix.train(tmp_path / "bad", "weird-net", "tiny", device=bad)
    with pytest.raises(TypeError, match="device"):
        seqmix.build("weird-net", "tiny", device=0)
    model = seqmix.build("weird-net", "tiny", device=torch.device("cpu"), seed=1)
    assert model.tok_emb.weight.device.type == "cpu"
    assert model.config["train"]["device"] == "cpu"
    if torch.cuda.is_available():
        return
    for cuda in ("cuda", "cuda:0", torch.device("cuda", 1)):
        with pytest.raises(RuntimeError, match=r"no CUDA device is available \(torch\.cuda\."
                                               r"is_available\(\) is false\)"):
            seqmix.build("weird-net", "tiny", device=cuda)
        with pytest.raises(RuntimeError, match="no CUDA device is available"):
            seqmix.train(tmp_path / "gpu", "weird-net", "tiny", device=cuda,
                         **train_overrides(corpus))
    # The library's own check, for a device given as a key: before the run folder exists.
    with pytest.raises((ValueError, RuntimeError), match="train.device"):
        seqmix.train(tmp_path / "gpu", "weird-net", "tiny",
                     **{**train_overrides(corpus), "train.device": "cuda"})
    assert not os.path.exists(tmp_path / "gpu")
    assert not os.path.exists(tmp_path / "bad")


def test_cpu_run_loads_onto_the_cpu(tmp_path, corpus):
    # device='cpu' trains as before; the run's checkpoint holds CPU tensors and loads back
    # with device='cpu' (the checkpoint's tensors are read onto the CPU, then moved).
    import torch
    r = seqmix.train(tmp_path / "run", "weird-net", "tiny", device="cpu",
                     **train_overrides(corpus))
    assert r["steps"] > 0
    with open(tmp_path / "run" / "config.toml") as f:
        assert "device = 'cpu'" in f.read()
    model = seqmix.load(tmp_path / "run", device="cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert abs(model.evaluate()["bpc"] - r["bpc"]) < 1e-4
    with pytest.raises(ValueError, match="must be 'cpu', 'cuda' or 'cuda:N'"):
        seqmix.load(tmp_path / "run", device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device is available"):
            seqmix.load(tmp_path / "run", device="cuda")
