"""python -m seqmix.bench: its PyTorch references agree with seqmix and with closed forms
(--check), and the timing harness runs end to end at toy sizes (no time is asserted)."""
import json
import subprocess
import sys


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "seqmix.bench", "-q", *args],
                          capture_output=True, text=True)


def test_references_agree_with_seqmix():
    p = _bench("--check")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "check: all agree" in p.stdout


def test_harness_runs_every_case():
    # Every case at toy sizes; of the modules (each compiled: ~10 s apiece on 2 cores) one
    # layer and one model.
    p = _bench("-L", "64", "128", "-B", "1", "-D", "64", "--reps", "1", "--module-lengths",
               "32", "--modules", "AIBAttention", "weird-net-a", "--json")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    pairs = {(r["case"], r["L"]) for r in rows if r.get("kind") == "pair"}
    for case in ("aib_op", "aib_layer", "ces_op", "attention"):
        assert (case, 64) in pairs and (case, 128) in pairs, pairs
    assert any(r.get("kind") == "overhead" and r["op"] == "aib_scan_kernel" for r in rows)
    fixed = [r for r in rows if r.get("kind") == "overhead_fixed"]
    assert fixed and fixed[0]["python_us"] > 0
    modules = [r for r in rows if r.get("kind") == "module"]
    assert {r["module"] for r in modules} == {"AIBAttention", "weird-net-a"}, modules
    assert all(r["L"] == 32 for r in modules), modules
    assert all("seqmix_ms" in r and "compiled_ms" in r for r in modules), modules


def test_bad_flags_are_refused():
    for args in (["-L", "0"], ["--cases", "nope"], ["--reps", "x"]):
        p = _bench(*args)
        assert p.returncode == 2 and "error" in p.stderr, (args, p.stderr)
