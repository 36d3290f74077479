"""The GPU check's scripts (tests/gpu/, run by scripts/gpu-check.sh on a GPU machine) on the
CPU: their harness, cases and comparisons run here against the CPU kernels, so that only the
CUDA kernels themselves are left for the GPU machine."""
import json
import os
import subprocess
import sys

import pytest

import seqmix

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
GPU = os.path.join(ROOT, "tests", "gpu")
sys.path.insert(0, GPU)
import models  # noqa: E402


def run(script, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, os.path.join(GPU, script), *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("preset", sorted(models.MIXERS))
def test_model_configs_are_the_presets(preset):
    built = seqmix.build(preset, size="mini", tokenizer="bytes").model_config
    mine = models.model_config(preset)
    for key in ("d_model", "n_layers", "n_heads", "d_ff", "max_len", "vocab_size", "causal",
                "mixers"):
        assert mine[key] == built[key], key


def test_check_ops_on_the_cpu_kernels(tmp_path):
    r = run("check_ops.py", "--device", "cpu", "--quick", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in open(tmp_path / "ops.jsonl")]
    names = " ".join(row["case"] for row in rows)
    for op in ("aib_scan", "ces_scan", "attention", "causal_mean", "extractor_conv",
               "gradcheck aib_scan", "large |A|", "bidirectional", "mask"):
        assert op in names
    assert all(row["ok"] for row in rows)
    assert {row["dtype"] for row in rows} >= {"float32", "float64", "bfloat16"}


def test_check_ops_catches_a_wrong_kernel(tmp_path, monkeypatch):
    """The harness fails a case whose kernel disagrees with its reference."""
    sys.path.insert(0, GPU)
    import check_ops
    import torch

    case = check_ops.Case("wrong", lambda x: x * 1.001, lambda x: x, [torch.randn(4, 5)], [0],
                          torch.float32)
    case.param_indices, case.param_dtype = set(), torch.float32
    r = check_ops.run_case(case, torch.device("cpu"), 1)
    assert not r["ok"] and r["errors"]["out"] > r["tolerance"]


def test_train_compare_runs(tmp_path):
    r = run("train_compare.py", "--device", "cpu", "--steps", "4", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.load(open(tmp_path / "train_compare.json"))
    losses = result["losses"]["cpu"]
    assert result["ok"] and len(losses) == 4
    # It learns: each step scores another batch of the repository's prose (which changes
    # with every doc edit), so one step may go up; by the fourth the loss is about a nat
    # below its start (5.65 -> 4.55 for seed 1), far beyond batch-to-batch noise.
    assert losses[-1] < losses[0] - 0.3, losses


def test_train_compare_refuses_bad_arguments(tmp_path):
    r = run("train_compare.py", "--device", "cpu", "--steps", "0", "--out", str(tmp_path))
    assert r.returncode != 0 and "--steps must be >= 1" in r.stderr


def test_user_models_match_seqmix_models():
    """The benchmark's "written by a user" models compute what seqmix's modules do."""
    import torch

    models.load_ops("")
    config = models.model_config("weird-net", max_len=64, d_model=32, n_layers=2, n_heads=2,
                                 d_ff=64)
    torch.manual_seed(0)
    ours = models.seqmix_classes()["SequenceModel"](config)
    users = models.pytorch_classes()["SequenceModel"](config)
    users.load_state_dict(ours.state_dict())
    tokens = torch.randint(0, 256, (2, 64))
    torch.testing.assert_close(users(tokens), ours(tokens), rtol=1e-4, atol=1e-4)
