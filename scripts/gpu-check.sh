#!/usr/bin/env bash
# The GPU check, sized for one call of under 8 minutes on a GPU machine (one H100 or H200,
# 16 cores; ../shared/GPU.md): it
#   1. builds seqmix's operators against the machine's PyTorch with its nvcc, for sm_90
#      (CMake -DSEQMIX_OPS_ONLY=ON -DSEQMIX_CUDA=on: libseqmix_ops.so needs nothing but
#      LibTorch, so none of the CLI's Debian libraries has to travel);
#   2. runs every op case on CUDA against the float64 CPU reference, forward and every
#      gradient, outputs poisoned, each run twice, plus finite differences in float64
#      (tests/gpu/check_ops.py);
#   3. trains Weird-Net mini 200 steps on CUDA and on the CPU from the same seed and compares
#      the loss curves (tests/gpu/train_compare.py);
#   4. runs the GPU benchmark in the time left (tests/gpu/bench.py);
# and prints a short table last. Full logs go to the folder given as the first argument, or
# $OUT, or ./gpu-check-out: machine.txt, build.log, check_ops.log, ops.jsonl,
# train_compare.log, train_compare.json, bench.log, bench.json.
#
# Usage (device tool): bash scripts/gpu-check.sh "$OUT"
# Exit status: 0 when the build, every op case and the training comparison pass.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
out=${1:-${OUT:-$here/gpu-check-out}}
py=${SEQMIX_PYTHON:-python3}
mkdir -p "$out"
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -n 2
  echo "cores $(nproc)"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

echo "gpu-check: building the operators (build-gpu/, $(nproc) jobs)"
if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSEQMIX_OPS_ONLY=ON \
         -DSEQMIX_CUDA=on -DSEQMIX_CCACHE=OFF -DSEQMIX_PYTHON="$(command -v "$py")" &&
       cmake --build build-gpu --parallel "$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log"
  echo "gpu-check: the build failed after $(elapsed) s (log: $out/build.log)"
  exit 1
fi
lib=$here/build-gpu/libseqmix_ops.so
echo "gpu-check: built in $(elapsed) s"

export PYTHONUNBUFFERED=1
"$py" tests/gpu/check_ops.py --lib "$lib" --device cuda --out "$out" \
  > "$out/check_ops.log" 2>&1
ops_rc=$?
tail -n 5 "$out/check_ops.log"
echo "gpu-check: op cases done at $(elapsed) s"

"$py" tests/gpu/train_compare.py --lib "$lib" --device cuda --steps 200 --out "$out" \
  > "$out/train_compare.log" 2>&1
train_rc=$?
tail -n 3 "$out/train_compare.log"
echo "gpu-check: training comparison done at $(elapsed) s"

# The benchmark gets what is left of ~7 minutes (at least one).
budget=$((420 - $(elapsed)))
[ "$budget" -lt 60 ] && budget=60
"$py" tests/gpu/bench.py --lib "$lib" --out "$out" --budget "$budget" > "$out/bench.log" 2>&1
bench_rc=$?
echo "gpu-check: benchmark done at $(elapsed) s"

echo
echo "==== gpu-check summary ($(head -n 2 "$out/machine.txt" | tail -n 1)) ===="
grep -h "^check_ops:" "$out/check_ops.log" || echo "check_ops: no result (rc $ops_rc)"
grep -h "^train_compare:" "$out/train_compare.log" || echo "train_compare: no result (rc $train_rc)"
if [ "$bench_rc" = 0 ]; then cat "$out/bench.log"; else tail -n 20 "$out/bench.log"; fi
echo "build + checks + benchmark: $(elapsed) s"
[ "$ops_rc" = 0 ] && [ "$train_rc" = 0 ]
