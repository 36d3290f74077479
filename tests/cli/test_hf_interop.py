"""`seqmix export --format hf` and `seqmix import` against Python's own safetensors library:
the folder's model.safetensors holds exactly the tensors `torch.load` finds in a pt export of
the same run, and a folder written by `safetensors.torch.save_file` (with a config.json made
in Python) imports into a run that evaluates as the original.

Run by CTest with the package's tests (python/CMakeLists.txt): SEQMIX_BIN=<build>/seqmix.
Needs only torch and safetensors (scripts/requirements.txt), not the seqmix package.
"""
import json
import os
import subprocess

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

SEQMIX_BIN = os.environ.get("SEQMIX_BIN", "seqmix")


def cli(*args):
    p = subprocess.run([SEQMIX_BIN, *map(str, args)], capture_output=True, text=True,
                       errors="replace")
    assert p.returncode == 0, f"seqmix {' '.join(map(str, args))}:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def eval_line(run):
    line = json.loads(cli("eval", run, "--threads", "1").strip().splitlines()[-1])
    line.pop("seconds")
    return line


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny Weird-Net trained 3 steps by the command line, and its pt and hf exports."""
    root = tmp_path_factory.mktemp("hf")
    (root / "c.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 400)
    cli("train", "--model", "weird-net", "--size", "tiny", "--max-len", "32", "--batch-size",
        "4", "--max-steps", "3", "--threads", "1", "--seed", "3", "--data", root / "c.txt",
        "--out", root / "run")
    cli("export", root / "run", "--out", root / "wn.pt")
    cli("export", root / "run", "--format", "hf", "--out", root / "wn-hf")
    return root


def test_load_file_gives_the_tensors_of_torch_load(run):
    ours = load_file(run / "wn-hf" / "model.safetensors")
    pt = torch.load(run / "wn.pt")
    assert set(ours) == set(pt["state_dict"])
    for name, t in pt["state_dict"].items():
        assert ours[name].dtype == t.dtype, name
        assert torch.equal(ours[name], t), name
    with safe_open(run / "wn-hf" / "model.safetensors", framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
    config = json.loads((run / "wn-hf" / "config.json").read_text())
    assert config["model_type"] == "seqmix"
    assert config["architectures"] == ["SeqmixForCausalLM"]
    assert config["tie_word_embeddings"] is False
    assert config["hidden_size"] == pt["config"]["model"]["d_model"]
    assert config["seqmix"]["tokenizer"] == "bytes"
    assert config["seqmix"]["version"] == pt["seqmix_version"]
    # Every value, floats bit for bit.
    assert config["seqmix"]["config"] == pt["config"]


def test_a_folder_python_writes_imports(run, tmp_path):
    pt = torch.load(run / "wn.pt")
    folder = tmp_path / "from-python"
    folder.mkdir()
    # safetensors' own order and alignment, and float64 weights: seqmix converts them.
    tensors = {k: (v.double() if v.is_floating_point() else v).contiguous()
               for k, v in pt["state_dict"].items()}
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    model = pt["config"]["model"]
    (folder / "config.json").write_text(json.dumps({
        "model_type": "seqmix", "architectures": ["SeqmixForCausalLM"],
        "vocab_size": model["vocab_size"], "hidden_size": model["d_model"],
        "num_hidden_layers": model["n_layers"], "num_attention_heads": model["n_heads"],
        "max_position_embeddings": model["max_len"], "tie_word_embeddings": False,
        "seqmix": {"format": 1, "version": pt["seqmix_version"], "tokenizer": "bytes",
                   "config": pt["config"]}}, indent=2))
    cli("import", folder, "--out", tmp_path / "imported")
    assert eval_line(tmp_path / "imported") == eval_line(run / "run")
    back = torch.load(run / "wn.pt")["state_dict"]
    cli("export", tmp_path / "imported", "--out", tmp_path / "again.pt")
    again = torch.load(tmp_path / "again.pt")["state_dict"]
    assert all(torch.equal(again[k], back[k]) for k in back)

    # A damaged file written by Python is an error naming the file and the tensor.
    tensors["pos_emb"] = tensors["pos_emb"][:-1].clone()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    p = subprocess.run([SEQMIX_BIN, "import", folder, "--out", tmp_path / "bad"],
                       capture_output=True, text=True)
    assert p.returncode == 1
    assert f"export '{folder}/model.safetensors': parameter 'pos_emb' has shape" in p.stderr
    assert not (tmp_path / "bad").exists()
