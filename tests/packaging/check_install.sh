#!/usr/bin/env bash
# Checks seqmix as a Python package built by pip (pyproject.toml), as a user gets it:
#  1. builds a wheel with the project environment's pip (no build isolation, build-pip/);
#  2. installs it into a fresh virtual environment and, from a folder outside the source
#     tree, runs the README's first Python example (the first ```python block under
#     "## Using seqmix from Python"), checks the installed metadata (version, py.typed,
#     the torch the extension was built against) and that the SentencePiece plugin is the
#     installed one;
#  3. installs the source tree editable (pip install -e) into another fresh environment and
#     runs one op from it.
# The fresh environments see .venv's torch, numpy, pybind11 and scikit-build-core through a
# .pth file naming a folder of links to them (no 2.6 GB download; `venv
# --system-site-packages` would give Debian's packages, not .venv's), and pip is given
# --no-index: nothing is fetched.
# scripts/test.sh runs it after the unit tests; alone, it needs scripts/setup.sh's .venv.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv_python=$here/.venv/bin/python
[ -x "$venv_python" ] ||
  { echo "check_install.sh: no $venv_python; run scripts/setup.sh" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/seqmix-packaging.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
step() { echo "packaging: [$((SECONDS - start)) s] $*"; }
fail() { echo "check_install.sh: $*" >&2; exit 1; }
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1
# Two LibTorch programs may share the cores with other work (scripts/test.sh says more).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# .venv's packages but seqmix (which scripts/build.sh installs there: pip would take it for
# the package it is asked to install) and the .pth files (not read in a folder a .pth names).
venv_site=$("$venv_python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
mkdir "$work/venv-site"
for entry in "$venv_site"/*; do
  case $(basename "$entry") in
    seqmix | seqmix-* | _seqmix* | __editable__* | *.pth) ;;
    *) ln -s "$entry" "$work/venv-site/" ;;
  esac
done
# A virtual environment of .venv's Python that also sees those, after its own packages.
fresh_env() {
  "$venv_python" -m venv "$1"
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  echo "$work/venv-site" >"$site/seqmix-test-venv.pth"
}

step "building a wheel (pip wheel --no-build-isolation --no-deps)"
(cd "$here" && "$venv_python" -m pip wheel -q --no-build-isolation --no-deps -w "$work/dist" .) \
  >"$work/wheel.log" 2>&1 || { tail -n 40 "$work/wheel.log" >&2; fail "the wheel build failed"; }
wheels=("$work"/dist/seqmix-*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || fail "expected one wheel in $work/dist"
wheel=${wheels[0]}
step "built $(basename "$wheel")"

step "installing it into a fresh environment"
fresh_env "$work/env"
# With dependencies: torch and numpy must be found installed (.venv's), since nothing can be
# downloaded.
"$work/env/bin/python" -m pip install -q "$wheel"

readme_example=$work/run/example.py
mkdir -p "$work/run"
# By position, not content: the first ```python block under the heading.
awk '
  /^## / { in_section = ($0 == "## Using seqmix from Python") }
  in_section && !done && /^```python[[:space:]]*$/ { in_block = 1; next }
  in_block && /^```/ { in_block = 0; done = 1; next }
  in_block { print }
' "$here/README.md" >"$readme_example"
[ -s "$readme_example" ] ||
  fail "README.md has no \`\`\`python block under \"## Using seqmix from Python\""

step "running README.md's Python example from $work/run"
(cd "$work/run" && "$work/env/bin/python" example.py) >"$work/example.log" 2>&1 || {
  cat "$readme_example" "$work/example.log" >&2
  fail "README.md's Python example (above) failed in the installed package"
}

# A SentencePiece model, to load through the installed plugin.
printf 'the quick brown fox jumps over the lazy dog\nseqmix packages its plugin\n' \
  >"$work/run/text.txt"
spm_train --input="$work/run/text.txt" --model_prefix="$work/run/tok" --vocab_size=300 \
  --model_type=bpe --byte_fallback=true --normalization_rule_name=identity \
  --hard_vocab_limit=false --minloglevel=2 >"$work/spm.log" 2>&1 ||
  { tail -c 2000 "$work/spm.log" >&2; fail "spm_train failed"; }

step "checking the installed package"
(cd "$work/run" && "$work/env/bin/python" - "$work/env" "$work/run/tok.model") <<'PY'
import importlib
import importlib.metadata as md
import os
import sys

import torch

env, model = (os.path.realpath(p) for p in sys.argv[1:])
import seqmix

def inside_env(path):
    return os.path.realpath(path).startswith(env + os.sep)

assert inside_env(seqmix.__file__), f"seqmix imported from {seqmix.__file__}, not {env}"
dist = md.distribution("seqmix")
assert inside_env(dist.locate_file("seqmix/__init__.py")), "metadata of another seqmix"
C = importlib.import_module("seqmix._C")
assert dist.version == seqmix.__version__ == C.__version__, \
    (dist.version, seqmix.__version__, C.__version__)
assert C.TORCH_VERSION == torch.__version__, (C.TORCH_VERSION, torch.__version__)
files = {str(f) for f in dist.files}
for name in ("seqmix/py.typed", "seqmix/libseqmix_sentencepiece.so"):
    assert name in files, f"the wheel lacks {name}"
    assert os.path.isfile(dist.locate_file(name)), f"{name} is not installed"
tok = C.Tokenizer.load(model)
assert tok.decode(tok.encode("the lazy fox")) == "the lazy fox"
with open("/proc/self/maps") as f:
    plugins = {line.split()[-1] for line in f if "libseqmix_sentencepiece" in line}
assert plugins and all(inside_env(p) for p in plugins), f"plugin loaded from {plugins}"
print(f"packaging: seqmix {dist.version} (torch {C.TORCH_VERSION}) from {dist.locate_file('')}")
PY

step "pip install -e into another fresh environment"
fresh_env "$work/env-e"
(cd "$here" && "$work/env-e/bin/python" -m pip install -q --no-build-isolation --no-deps -e .) \
  >"$work/editable.log" 2>&1 ||
  { tail -n 40 "$work/editable.log" >&2; fail "pip install -e failed"; }
(cd "$work/run" && "$work/env-e/bin/python" - "$here") <<'PY'
import importlib.metadata as md
import os
import sys

import torch

import seqmix.ops  # noqa: F401  (loads the extension: torch.ops.seqmix.*)
import seqmix

src = os.path.realpath(os.path.join(sys.argv[1], "python", "seqmix"))
assert os.path.realpath(os.path.dirname(seqmix.__file__)) == src, seqmix.__file__
assert md.version("seqmix") == seqmix.__version__
x, w = torch.randn(2, 5, 3, dtype=torch.float64), torch.randn(5, 3, 3, dtype=torch.float64)
got = torch.ops.seqmix.extractor_conv(x, w)
want = torch.ops.seqmix.extractor_conv_reference(x, w)
torch.testing.assert_close(got, want)
print(f"packaging: editable seqmix {seqmix.__version__} from {src}: extractor_conv ok")
PY
step "ok"
