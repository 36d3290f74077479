"""tests/gpu/cli_checks.py (the GPU check's command-line runs) refuses bad arguments before it
runs anything. Its checks themselves ran on the CPU with `--device cpu --size tiny --max-len
32 --steps 20` (docs/CUDA.md); they take minutes, too long for the suite."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tests", "gpu", "cli_checks.py")
BIN = os.environ.get("SEQMIX_BIN", os.path.join(ROOT, "build", "seqmix"))


@pytest.mark.parametrize("args, message", [
    (["--steps", "5"], "--steps: at least 20"),
    (["--only", "train,fly"], "--only: unknown check(s) ['fly']"),
    (["--bin", os.path.join(ROOT, "README.md")], "--bin: not an executable"),
])
def test_refuses_bad_arguments(tmp_path, args, message):
    base = {"--bin": BIN, "--out": str(tmp_path / "out")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    cmd = [sys.executable, SCRIPT] + [x for kv in base.items() for x in kv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "out").exists()  # nothing made before the arguments are checked
