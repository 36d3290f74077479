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


def test_check_ops_compares_sdpa_runs_within_tolerance():
    """Two runs that differ by less than SDPA_RUN_TO_RUN pass for an SDPA case, labelled
    as compared within a tolerance; the same difference fails any other case."""
    sys.path.insert(0, GPU)
    import check_ops
    import torch

    calls = iter(range(10))

    def jitter(x):  # run 0 exact, run 1 one part in 1e7 off: a float32 atomics-order change
        return x * (1 + 1e-7 * next(calls))

    for sdpa in (True, False):
        calls = iter(range(10))
        case = check_ops.Case("jitter", jitter, lambda x: x, [torch.randn(4, 5)], [0],
                              torch.float32, sdpa=sdpa)
        case.param_indices, case.param_dtype = set(), torch.float32
        r = check_ops.run_case(case, torch.device("cpu"), 1)
        if sdpa:
            assert r["ok"] and r["determinism"].startswith(
                "SDPA nondeterministic: compared within tol 1e-05"), r
        else:
            assert not r["ok"] and r["determinism"] == "the two runs differ", r


def test_bench_dry_run(tmp_path):
    """bench.py's every section at tiny shapes on the CPU, and its records in the fields the
    records script takes."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import bench_gpu_records

    r = run("bench.py", "--dry-run", "--compile-backend", "eager", "--budget", "600",
            "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    records = [json.loads(line) for line in open(tmp_path / "bench-gpu.jsonl")]
    assert {(x["op"], x["dtype"], x["pass"]) for x in records} == {
        (op, dtype, p) for op in ("aib_scan", "ces_scan") for dtype in ("float32", "bfloat16")
        for p in ("forward", "backward")}
    for x in records:
        assert not [f for f in bench_gpu_records.FIELDS if f not in x], x
        assert x["dry_run"] and x["seqmix_ms"] > 0 and x["floor_ms"] > 0, x
        assert x["compiled_ms"] is not None and x["eager_ms"] is not None, x
    result = json.load(open(tmp_path / "bench.json"))
    checks = {c["check"]: c for c in result["checks"]}
    assert checks["cuda_graph"]["ok"] is True
    assert checks["fallbacks"]["ok"] in (True, None)
    assert not result["skipped"] and not result["errors"], result
    assert {row["model"] for row in result["training"]} == set(models.MIXERS)
    assert "==== bench: training, checks, skipped" in r.stdout


def test_bench_gpu_records(tmp_path):
    """Records merge into the docs' file by key, dry runs are refused, the tables print."""
    script = os.path.join(ROOT, "scripts", "bench_gpu_records.py")
    base = {"op": "aib_scan", "L": 16384, "B": 4, "D": 512, "dtype": "float32",
            "pass": "forward", "seqmix_ms": 2.0, "floor_ms": 0.1, "pct_of_floor": 5.0,
            "compiled_ms": 4.0, "eager_ms": 9.0, "fallbacks": 0, "card": "NVIDIA H200",
            "driver": "580", "torch": "2.11.0", "cuda": "13.0", "date": "2026-12-04T10:00Z",
            "command": "bash scripts/gpu-check.sh"}

    def write(name, recs):
        path = tmp_path / name
        path.write_text("".join(json.dumps(x) + "\n" for x in recs))
        return str(path)

    def records(*args):
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                              timeout=60)

    docs = str(tmp_path / "bench-gpu.jsonl")
    first = write("a.jsonl", [base, dict(base, **{"pass": "backward", "seqmix_ms": 8.0})])
    r = records(first, "--docs", docs)
    assert r.returncode == 0, r.stderr
    assert "| NVIDIA H200 | aib_scan | float32 | 16384 | forward | 2.000 |" in r.stdout
    second = write("b.jsonl", [dict(base, seqmix_ms=1.0), dict(base, L=4096)])
    r = records(second, "--docs", docs)
    assert r.returncode == 0, r.stderr
    merged = [json.loads(line) for line in open(docs)]
    assert [(x["L"], x["pass"], x["seqmix_ms"]) for x in merged] == [
        (4096, "forward", 2.0), (16384, "forward", 1.0), (16384, "backward", 8.0)]
    before = open(docs).read()
    dry = write("dry.jsonl", [dict(base, dry_run=True)])
    partial = write("partial.jsonl", [{k: v for k, v in base.items() if k != "floor_ms"}])
    for bad, why in ((dry, "a dry run"), (partial, "missing floor_ms")):
        r = records(bad, "--docs", docs)
        assert r.returncode == 1 and why in r.stderr, r.stderr
        assert open(docs).read() == before
    r = records("--summary", first)
    assert r.returncode == 0, r.stderr
    line = [x for x in r.stdout.splitlines() if x.startswith("aib_scan")][0]
    assert line.split() == ["aib_scan", "float32", "16384", "|", "2.000", "5.0", "2.0", "|",
                            "8.000", "5.0", "0.5", "|", "0"], line


def _ncu_row(kid, kernel, stream, metric, unit, value):
    return (f'"{kid}","4242","python3.12","127.0.0.1","{kernel}","1","{stream}","(256, 1, 1)",'
            f'"(2048, 1, 1)","0","9.0","Command line profiler metrics","{metric}","{unit}",'
            f'"{value}"')


# What `ncu --csv --log-file` writes (its own lines, then one row per kernel and metric), in
# both unit styles: --print-units base and ncu's scaled units.
_TILE = ("void seqmix::ops::(anonymous namespace)::tile_forward<float, float>"
         "(seqmix::ops::(anonymous namespace)::ScanArgs<float, float>)")
_FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
         "(int, at::native::FillFunctor<float>)")
_CHUNK = "void seqmix::ops::(anonymous namespace)::chunk_summary<float, float>(CesArgs)"
NCU_LOG = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    '"Metric Value"',
    _ncu_row(0, _TILE, 13, "dram__bytes_read.sum", "byte", "268,435,456"),
    _ncu_row(0, _TILE, 13, "dram__bytes_write.sum", "Mbyte", "134.22"),
    _ncu_row(0, _TILE, 13, "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "41.5"),
    _ncu_row(0, _TILE, 13, "gpu__time_duration.sum", "nsecond", "200,000"),
    _ncu_row(1, _FILL, 13, "gpu__time_duration.sum", "usecond", "10.5"),
    _ncu_row(2, _CHUNK, 14, "gpu__time_duration.sum", "nsecond", "50,000"),
    _ncu_row(2, _CHUNK, 14, "dram__bytes_read.sum", "byte", "n/a"),
    "==PROF== Disconnected from process 4242", ""])


def test_ncu_table_from_a_log(tmp_path):
    """The Nsight Compute log's parser: units, thousands separators, kernels told apart by
    op through their streams."""
    sys.path.insert(0, GPU)
    import ncu_scans

    kernels = ncu_scans.parse(NCU_LOG)
    assert [k["id"] for k in kernels] == [0, 1, 2]
    k0 = kernels[0]
    assert k0["read_bytes"] == 268435456 and abs(k0["write_bytes"] - 134.22e6) < 1
    assert abs(k0["seconds"] - 2e-4) < 1e-12 and k0["dram_pct"] == 41.5
    assert abs(kernels[1]["seconds"] - 10.5e-6) < 1e-12 and kernels[2]["read_bytes"] is None
    groups = ncu_scans.by_op(kernels)
    assert [len(groups[op]) for op in ncu_scans.OPS] == [2, 1]
    path = tmp_path / "ncu.csv"
    path.write_text(NCU_LOG)
    r = subprocess.run([sys.executable, os.path.join(GPU, "ncu_scans.py"), "--parse", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("ncu: aib_scan fwd+bwd") and "2 kernels" in first, first
    assert "seqmix::ops::tile_forward<float, float>" in r.stdout
    path.write_text("==ERROR== ERR_NVGPUCTRPERM\n")
    r = subprocess.run([sys.executable, os.path.join(GPU, "ncu_scans.py"), "--parse", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout.startswith("ncu: no profile"), r.stdout


def test_ncu_scans_runs_on_the_cpu():
    r = run("ncu_scans.py", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("forward + backward") == len(("aib_scan", "ces_scan"))
