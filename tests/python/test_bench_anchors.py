"""python -m seqmix.bench_anchors runs end to end at toy sizes (--smoke; the compiled side
left out, since inductor's first compilation alone takes tens of seconds): every op and model
cell is measured on both remaining sides, the PyTorch models have seqmix's parameter count
and loss from the same weights, and --resume skips what a file holds. No time is asserted."""
import json
import re
import subprocess
import sys


def _anchors(*args):
    return subprocess.run([sys.executable, "-m", "seqmix.bench_anchors", *args],
                          capture_output=True, text=True)


def test_smoke_measures_every_cell_and_resumes(tmp_path):
    out = tmp_path / "cells.jsonl"
    p = _anchors("--smoke", "--no-compile", "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    cells = [json.loads(line) for line in out.read_text().splitlines()]
    ops = {c["name"] for c in cells if c["case"] == "ops"}
    models = {(c["name"], c["precision"]) for c in cells if c["case"] == "models"}
    assert ops == {"aib", "ces", "attention"}, ops
    assert models == {(m, p) for m in ("weird-net", "weird-net-a", "transformer")
                      for p in ("fp32", "bf16")}, models
    for c in cells:
        for side in ("eager", "seqmix"):
            assert c["sides"][side]["median_ms"] > 0, c
    # The PyTorch models match seqmix's: same parameter count, same loss.
    losses = re.findall(r"\(same\); loss ([0-9.]+) vs ([0-9.]+)", p.stdout)
    assert len(losses) == 3 and all(a == b for a, b in losses), p.stdout
    # A second run with --resume measures nothing new.
    again = _anchors("--smoke", "--no-compile", "--resume", str(out))
    assert again.returncode == 0, again.stderr
    assert len(out.read_text().splitlines()) == len(cells)


def test_bad_flags_are_errors():
    p = _anchors("--shapes", "100x2")
    assert p.returncode == 2 and "--shapes" in p.stderr, p.stderr
    p = _anchors("--models", "gpt")
    assert p.returncode == 2 and "--models" in p.stderr, p.stderr
