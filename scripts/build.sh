#!/usr/bin/env bash
# Configures and builds seqmix in build/ (Release), then installs the Python package into the
# project environment (.venv/) from pyproject.toml, so `.venv/bin/python -c "import seqmix"`
# works without PYTHONPATH. Extra arguments are ninja targets of build/, and skip the install.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build --parallel "$(nproc)" ${1:+--target "$@"}

# The package as pip builds it for users (README.md, "Using seqmix from Python"): a regular
# install, not an editable one, because an editable install's import hook comes before
# PYTHONPATH, and CTest's python.* tests import build/python through PYTHONPATH. Its CMake
# build is build-pip/ (never build/): incremental, and ccache serves it what build/ just
# compiled (~1.5 min; ~5 s when nothing changed). --no-build-isolation: against .venv's torch.
if [ $# -eq 0 ]; then
  echo "build: installing the seqmix Python package into .venv (build-pip/)"
  .venv/bin/python -m pip install --disable-pip-version-check -q --no-build-isolation \
    --no-deps .
fi
