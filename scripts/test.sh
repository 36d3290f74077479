#!/usr/bin/env bash
# Sets up (apt packages, data), builds everything, compiles the CUDA sources, runs the unit
# tests, checks the Python package as pip builds and installs it (tests/packaging/), then
# builds and runs examples/ against an installed copy (scripts/examples.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh
# The CUDA sources, compiled with nvcc from PyPI (these machines cannot run them).
bash scripts/cuda-compile-check.sh
cd build
# ctest runs two test programs at once on two cores. OpenMP's default spin-waiting makes a
# two-thread LibTorch program crawl when the other core is busy (measured: 3.3 vs 186 steps/s
# on the tiny model); passive waiting does not.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --output-on-failure --parallel "$(nproc)" --timeout 900
cd "$here"
# seqmix as a Python package built by pip: a wheel installed into a fresh environment runs
# README.md's Python example, and an editable install runs an op (~20-30 s with build-pip/
# warm from scripts/build.sh).
bash tests/packaging/check_install.sh
# seqmix as an installed library: examples/ built against `cmake --install` output and run.
bash scripts/examples.sh
# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
if [ "${SEQMIX_SANITIZERS:-1}" != 0 ]; then
  bash scripts/sanitize.sh
fi
