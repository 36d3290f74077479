#!/usr/bin/env bash
# The main job on real data: set up, build, train a Weird-Net (AIB attention, Structure B)
# byte-level language model on the State of the Union corpus, report its held-out bits per
# character, and generate a sample from it. Training takes about 3.5 minutes on 2 cores.
# Environment: STEPS (default 600), MODEL (weird-net), SIZE (mini), OUT (runs/demo-<model>).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh seqmix_cli
model=${MODEL:-weird-net}
size=${SIZE:-mini}
steps=${STEPS:-600}
out=${OUT:-runs/demo-$model}
# --overwrite: a demo run already in $out is replaced (kept until the new run's first
# checkpoint).
./build/seqmix train --model "$model" --size "$size" --data sotu --max-steps "$steps" \
  --seed 1337 --set train.eval_interval=100 --set train.eval_max_bytes=65536 \
  --set train.checkpoint_interval=100 --set train.log_interval=25 --out "$out" --overwrite
echo
echo "== sample (temperature 0.8, top-p 0.95) =="
./build/seqmix generate "$out" --prompt "My fellow Americans, " --max-new-tokens 400 \
  --temperature 0.8 --top-p 0.95 --seed 1
echo
echo "run folder: $out (config.toml, metrics.jsonl, checkpoint.pt)"
