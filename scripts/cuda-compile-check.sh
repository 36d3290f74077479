#!/usr/bin/env bash
# Compiles seqmix's CUDA sources (the kernels and their dispatcher registrations) with nvcc
# from the project environment (nvidia-cuda-nvcc, scripts/requirements.txt), for sm_90, into
# objects that nothing links: these machines have no GPU and no CUDA libraries to link, but
# the sources must never rot unseen. The kernels run on a GPU machine (scripts/gpu-check.sh).
# Build folder: build-cuda-check/ (target seqmix_cuda_compile_check only).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
nvcc=$(ls .venv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n 1 || true)
if [ -z "$nvcc" ]; then
  echo "cuda-compile-check: no nvcc in .venv (run scripts/setup.sh)" >&2
  exit 1
fi
cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f build-cuda-check/CMakeCache.txt ]; then
  # The wheel's CUDA libraries are in lib/, where nvcc's link of CMake's compiler check
  # looks for them only when told.
  cmake -S . -B build-cuda-check "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSEQMIX_CUDA=off \
    -DSEQMIX_CUDA_COMPILE_CHECK=ON -DCMAKE_CUDA_COMPILER="$here/$nvcc" \
    -DCMAKE_CUDA_FLAGS="-L$cuda_home/lib" -DSEQMIX_BUILD_TESTS=OFF -DSEQMIX_BUILD_BENCH=OFF \
    > /dev/null
fi
cmake --build build-cuda-check --target seqmix_cuda_compile_check
echo "cuda-compile-check: the CUDA sources compile ($("$nvcc" --version | tail -n 1))"
