#!/usr/bin/env bash
# Mixed precision (train.precision = bf16) against fp32 on this machine, in one run:
#   1. training throughput at `base` size: the same seed and batches in both precisions,
#      STEPS_BASE steps each; tokens/s is the median of the metrics lines after the first
#      (which includes the warm-up);
#   2. held-out bpc after the README demo's budget (weird-net mini, 600 steps on sotu,
#      scripts/demo.sh's settings) in both precisions, and their ratio;
#   3. the kernels and layers, forward + backward: `seqmix bench ops --precision fp32|bf16`
#      at B=4, D=512, L=4096.
# Parts: PARTS="throughput bpc kernels" (default all). Runs go to OUT (runs/bf16-bench).
# fp32 products run on MKL, bf16 ones on oneDNN (`seqmix info` names both).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh seqmix_cli
out=${OUT:-runs/bf16-bench}
parts=${PARTS:-throughput bpc kernels}
steps_base=${STEPS_BASE:-12}
py=/usr/bin/python3
mkdir -p "$out"
./build/seqmix info | grep -E '^(BLAS|bf16)'

median_tokens_per_s() {  # metrics.jsonl -> median tokens/s of the training lines after the first
  "$py" - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
v = [r["tokens_per_s"] for r in rows if r.get("split") == "train" and "tokens_per_s" in r][1:]
print(f"{statistics.median(v):.0f}" if v else "nan")
EOF
}

final_bpc() {  # metrics.jsonl -> the final held-out bpc
  "$py" - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print([r for r in rows if r.get("final")][-1]["bpc"])
EOF
}

if [[ " $parts " == *" throughput "* ]]; then
  echo "== 1. training throughput, weird-net base, $steps_base steps =="
  for p in fp32 bf16; do
    ./build/seqmix train --model weird-net --size base --data sotu --max-steps "$steps_base" \
      --seed 1 --precision "$p" --set train.eval_interval=0 --set train.eval_max_bytes=16384 \
      --set train.log_interval=2 --out "$out/base-$p" --overwrite > "$out/base-$p.log" 2>&1
  done
  a=$(median_tokens_per_s "$out/base-fp32/metrics.jsonl")
  b=$(median_tokens_per_s "$out/base-bf16/metrics.jsonl")
  echo "tokens/s: fp32 $a, bf16 $b, bf16/fp32 $("$py" -c "print(f'{$b/$a:.2f}x')")"
fi

if [[ " $parts " == *" bpc "* ]]; then
  echo "== 2. held-out bpc after the demo's budget (weird-net mini, 600 steps, sotu) =="
  for p in fp32 bf16; do
    ./build/seqmix train --model weird-net --size mini --data sotu --max-steps 600 \
      --seed 1337 --precision "$p" --set train.eval_interval=100 \
      --set train.eval_max_bytes=65536 --set train.checkpoint_interval=100 \
      --set train.log_interval=25 --out "$out/demo-$p" --overwrite > "$out/demo-$p.log" 2>&1
  done
  a=$(final_bpc "$out/demo-fp32/metrics.jsonl")
  b=$(final_bpc "$out/demo-bf16/metrics.jsonl")
  echo "held-out bpc: fp32 $a, bf16 $b, difference $("$py" -c "print(f'{100*($b-$a)/$a:+.2f}%')")"
  echo "tokens/s: fp32 $(median_tokens_per_s "$out/demo-fp32/metrics.jsonl")," \
    "bf16 $(median_tokens_per_s "$out/demo-bf16/metrics.jsonl")"
fi

if [[ " $parts " == *" kernels "* ]]; then
  echo "== 3. kernels and layers, forward + backward, B=4 D=512 L=4096 =="
  for p in fp32 bf16; do
    ./build/seqmix bench ops --L 4096 --reps 3 --precision "$p" \
      --ops aib_scan_kernel,ces_scan_kernel,attention_kernel,aib_layer,attention_layer
  done
fi
