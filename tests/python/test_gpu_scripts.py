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


@pytest.mark.parametrize("preset", sorted(models.PRESETS))
def test_model_configs_are_the_presets(preset):
    built = seqmix.build(preset, size="mini", tokenizer="bytes").model_config
    mine = models.model_config(preset)
    for key in ("d_model", "n_layers", "n_heads", "d_ff", "max_len", "vocab_size", "causal",
                "mixers", *models.PRESETS[preset]):
        assert mine[key] == built[key], key
    # What the sections leave out is the C++ defaults' (models.PRESETS names the rest).
    for key in ("norm", "bias", "activation", "tie_embeddings"):
        assert mine.get(key, built[key]) == built[key], key


@pytest.mark.parametrize("preset", sorted(models.PRESETS))
def test_prefill_states_are_those_of_step(preset):
    """models.prefill's states (from one forward) decode as those of step after step do:
    the same logits at the context's last token and at the next one."""
    import torch

    models.load_ops("")
    config = models.model_config(preset, max_len=40, d_model=16, n_layers=2, n_heads=2,
                                 d_ff=32)
    torch.manual_seed(0)
    model = models.seqmix_classes()["SequenceModel"](config).eval()
    tokens = torch.randint(0, 256, (2, 33))
    with torch.no_grad():
        states = model.init_state(2)
        for i in range(32):
            last = model.step(tokens[:, i], states)
        after = model.step(tokens[:, 32], states)
        pre_states, pre_last = models.prefill(model, tokens[:, :32])
        assert [s.pos for s in pre_states] == [32, 32]
        pre_after = model.step(tokens[:, 32], pre_states)
    torch.testing.assert_close(pre_last, last, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(pre_after, after, rtol=1e-4, atol=1e-5)


def test_hf_model_on_the_operators_library():
    """Where the ops come from the operators-only library and seqmix._C is not built (the
    GPU machine), models.hf_module still gives transformers' SeqmixForCausalLM, on those
    ops, without loading the extension; it generates."""
    lib = os.path.join(ROOT, "build-ops", "libseqmix_ops.so")
    if not os.path.exists(lib):
        pytest.skip("no build-ops/libseqmix_ops.so (cmake -DSEQMIX_OPS_ONLY=ON -B build-ops)")
    pytest.importorskip("transformers")
    code = f"""
import sys, torch
sys.path.insert(0, {GPU!r})
import models
models.load_ops({lib!r})
hf, why = models.hf_module()
assert hf is not None, why
config = models.model_config("weird-net", max_len=32, d_model=16, n_layers=2, n_heads=2,
                             d_ff=32)
ours = models.seqmix_classes()["SequenceModel"](config)
lm = models.hf_causal_lm(hf, config, ours.state_dict()).eval()
ids = torch.randint(0, 256, (1, 8))
out = lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                  min_new_tokens=3, do_sample=False, pad_token_id=0)
assert out.shape == (1, 11), out.shape
assert "seqmix._C" not in sys.modules and sys.modules["seqmix"].__file__.startswith(
    {os.path.join(ROOT, "python")!r}), sys.modules["seqmix"].__file__
print("ok")
"""
    # The source tree's seqmix (no extension) first, as on the GPU machine.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_check_ops_on_the_cpu_kernels(tmp_path):
    r = run("check_ops.py", "--device", "cpu", "--quick", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in open(tmp_path / "ops.jsonl")]
    names = " ".join(row["case"] for row in rows)
    import seqmix.nn  # noqa: F401
    every_op = {op for _, op, _ in seqmix._C.op_cases()}
    for op in sorted(every_op) + ["gradcheck aib_scan", "large |A|", "bidirectional", "mask"]:
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
    """bench.py's every section at tiny shapes on the CPU, and its records (scan, train,
    generate) in the fields the records script takes."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    sys.path.insert(0, GPU)
    import bench
    import bench_gpu_records

    r = run("bench.py", "--dry-run", "--compile-backend", "eager", "--budget", "600",
            "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    records = [json.loads(line) for line in open(tmp_path / "bench-gpu.jsonl")]
    by_kind = {k: [x for x in records if x.get("kind") == k]
               for k in ("scan", "train", "generate")}
    assert sum(map(len, by_kind.values())) == len(records)
    assert {(x["op"], x["dtype"], x["pass"]) for x in by_kind["scan"]} == {
        (op, dtype, p) for op in ("aib_scan", "ces_scan") for dtype in ("float32", "bfloat16")
        for p in ("forward", "backward")}
    for x in by_kind["scan"]:
        assert x["dry_run"] and x["seqmix_ms"] > 0 and x["floor_ms"] > 0, x
        assert x["compiled_ms"] is not None and x["eager_ms"] is not None, x
    # Every record has its kind's fields: the records script refuses them as a dry run only.
    for x in records:
        assert bench_gpu_records.problems(x) == ["a dry run (CPU, tiny shapes)"], x

    size = bench.SIZES["dry"]
    assert {(x["model"], x["L"]) for x in by_kind["train"]} == {
        (m, L) for m in models.MIXERS for L in size["train"]["L"]}
    n_layers = size["train"]["n_layers"]
    for x in by_kind["train"]:
        assert x["precision"] == "bf16" and x["kernel_count_source"].startswith("cpu dry run")
        for side in ("seqmix", "pytorch", "pytorch_eager", "seqmix_compiled"):
            assert x[f"{side}_tokens_per_s"] > 0, x
            assert x[f"{side}_peak_gib"] is None, x  # no allocator peak on the CPU
            assert x[f"{side}_kernels_per_step"] > 0, x
        assert x["ratio"] == pytest.approx(x["seqmix_tokens_per_s"] / x["pytorch_tokens_per_s"])
        assert x["ratio_compiled"] == pytest.approx(
            x["seqmix_compiled_tokens_per_s"] / x["pytorch_tokens_per_s"])
        for side in ("pytorch", "seqmix_compiled"):  # compiled: no block boundaries
            assert x[f"{side}_kernels_per_block"] is None, x
        for side in ("seqmix", "pytorch_eager"):
            blocks = x[f"{side}_kernels_per_block"]
            assert len(blocks) == n_layers and all(b > 0 for b in blocks), x
            # The blocks are part of the step, which also embeds, scores and steps AdamW.
            assert sum(blocks) < x[f"{side}_kernels_per_step"], x
        if x["model"] == "transformer":  # the same layers on both sides
            assert x["seqmix_kernels_per_block"] == x["pytorch_eager_kernels_per_block"], x
        else:  # Algorithm 1 in PyTorch: many operators where seqmix calls one
            assert x["pytorch_eager_kernels_per_block"][0] > x["seqmix_kernels_per_block"][0]

    g = size["generate"]
    expected = {(m, c, b) for m in bench.GENERATE_PRESETS for c in g["contexts"]
                for b in g["batches"] if c <= g["max_context"].get(m, c)}
    assert {(x["model"], x["context"], x["batch"]) for x in by_kind["generate"]} == expected
    assert "extractor-transformer" in {m for m, _, _ in expected}
    kv = {(x["context"], x["batch"]): x["seqmix_tokens_per_s"] for x in by_kind["generate"]
          if x["model"] == "transformer"}
    for x in by_kind["generate"]:
        assert x["new_tokens"] == g["new_tokens"] and x["seqmix_tokens_per_s"] > 0, x
        assert x["kv_cache_tokens_per_s"] == kv[(x["context"], x["batch"])], x
        assert "error" not in x and "seqmix_error" not in x, x
    try:
        import transformers  # noqa: F401
        assert not [x for x in by_kind["generate"] if "hf_error" in x]
        # generate(n + 1) minus generate(1) can come out <= 0 at these sizes: then None.
        assert any(x["hf_tokens_per_s"] for x in by_kind["generate"])
        assert any(x["hf_kv_cache_tokens_per_s"] for x in by_kind["generate"])
    except ImportError:
        assert all(x["hf_error"].startswith("not available") for x in by_kind["generate"])

    result = json.load(open(tmp_path / "bench.json"))
    checks = {c["check"]: c for c in result["checks"]}
    assert checks["cuda_graph"]["ok"] is True
    assert checks["fallbacks"]["ok"] in (True, None)
    assert not result["skipped"] and not result["errors"], result
    assert result["training"] == by_kind["train"]
    assert result["generation"] == by_kind["generate"]
    assert "==== bench: training, checks, skipped" in r.stdout
    # The tables fit in 80 columns (the prose is wrapped; check lines are one line each).
    tail = r.stdout[r.stdout.index("==== bench: training, checks"):]
    wide = [line for line in tail.splitlines()
            if len(line) > 80 and not line.startswith(("bench-check:", "bench: "))]
    assert not wide, wide


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


def test_bench_gpu_records_train_and_generate(tmp_path):
    """Training and generation records merge by their own keys beside the scan records (a
    scan record without "kind", as the first ones were, is replaced by its new twin), are
    refused when incomplete or of an unknown kind, and print as their own tables."""
    script = os.path.join(ROOT, "scripts", "bench_gpu_records.py")
    machine = {"card": "NVIDIA H200", "driver": "580", "torch": "2.11.0", "cuda": "13.0",
               "date": "2026-12-04T10:00Z", "command": "bash scripts/gpu-check.sh"}
    scan = dict(machine, op="aib_scan", L=16384, B=4, D=512, dtype="float32", seqmix_ms=2.0,
                floor_ms=0.1, pct_of_floor=5.0, compiled_ms=4.0, eager_ms=9.0, fallbacks=0,
                **{"pass": "forward"})
    train = dict(machine, kind="train", model="weird-net-a", L=16384, batch=4, d_model=256,
                 n_layers=4, precision="bf16", seqmix_tokens_per_s=400000.0,
                 pytorch_tokens_per_s=200000.0, pytorch_eager_tokens_per_s=100000.0, ratio=2.0,
                 seqmix_peak_gib=3.5, pytorch_peak_gib=9.25, seqmix_kernels_per_step=310,
                 pytorch_kernels_per_step=520, kernel_count_source="CUDA kernels")
    gen = dict(machine, kind="generate", model="weird-net-a", context=4096, batch=1,
               new_tokens=64, d_model=256, n_layers=4, precision="bf16",
               seqmix_tokens_per_s=900.0, hf_tokens_per_s=300.0, kv_cache_tokens_per_s=1200.0,
               hf_kv_cache_tokens_per_s=1500.0)

    def write(name, recs):
        path = tmp_path / name
        path.write_text("".join(json.dumps(x) + "\n" for x in recs))
        return str(path)

    def records(*args):
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                              timeout=60)

    docs = tmp_path / "bench-gpu.jsonl"
    docs.write_text(json.dumps(scan) + "\n")  # an old record: no "kind"
    first = write("a.jsonl", [dict(scan, kind="scan", seqmix_ms=1.5), train, gen,
                              dict(gen, context=16384, seqmix_tokens_per_s=800.0)])
    r = records(first, "--docs", str(docs))
    assert r.returncode == 0, r.stderr
    merged = [json.loads(line) for line in open(docs)]
    assert [(x.get("kind"), x.get("seqmix_ms"), x.get("context")) for x in merged] == [
        ("scan", 1.5, None), ("train", None, None), ("generate", None, 4096),
        ("generate", None, 16384)]
    # The record has no seqmix_compiled_tokens_per_s (an optional field): "-" in its column.
    assert "| NVIDIA H200 | weird-net-a | 16384 | 4 | 256 | 400.0 | - | 200.0 | 2.00 | 100.0 | " \
           "3.50 | 9.25 | 310 | 520 |" in r.stdout, r.stdout
    assert "| NVIDIA H200 | weird-net-a | 4096 | 1 | 64 | 900 | 300 | 3.00 | 1200 | 0.75 | " \
           "1500 |" in r.stdout, r.stdout
    # A new run's record of the same key replaces the old one; other keys stay.
    second = write("b.jsonl", [dict(train, seqmix_tokens_per_s=500000.0, ratio=2.5),
                               dict(train, L=4096)])
    r = records(second, "--docs", str(docs))
    assert r.returncode == 0, r.stderr
    trains = [json.loads(line) for line in open(docs) if '"train"' in line]
    assert [(x["L"], x["seqmix_tokens_per_s"]) for x in trains] == [(4096, 400000.0),
                                                                     (16384, 500000.0)]
    before = docs.read_text()
    no_peak = write("c.jsonl", [{k: v for k, v in train.items() if k != "seqmix_peak_gib"}])
    odd = write("d.jsonl", [dict(gen, kind="inference")])
    dry = write("e.jsonl", [dict(gen, dry_run=True)])
    for bad, why in ((no_peak, "refused train weird-net-a L=16384: missing seqmix_peak_gib"),
                     (odd, "kind 'inference' is not scan, train or generate"),
                     (dry, "refused generate weird-net-a context=4096 batch=1: a dry run")):
        r = records(bad, "--docs", str(docs))
        assert r.returncode == 1 and why in r.stderr, r.stderr
        assert docs.read_text() == before
    r = records("--summary", first)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80, r.stdout
    assert [x for x in lines if x.startswith("weird-net-a ")][0].split() == [
        "weird-net-a", "16384", "400.0", "200.0", "2.00", "100.0", "3.50", "9.25", "310", "520"]
    assert [x for x in lines if x.startswith("weird-net-a") and " 4096 " in x][0].split() == [
        "weird-net-a", "4096", "1", "|", "900", "300", "3.00", "|", "1200", "0.75"]


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
