#!/usr/bin/env bash
# The Extractor paper's comparison (Figs. 4-8) at CPU scale on Moby-Dick: a 5000-piece BPE
# tokenizer trained on the training split, then six models trained by `seqmix compare` on
# exactly the same batches: the Extractor Transformer, the Transformer with 1 and with 8
# self-attention heads, the Extractor without W_opt, without the adjustment, and without
# both (Fig. 8). Writes compare.png, summary.jsonl and per-model runs under $OUT, then samples
# from "Once upon a time" with top-p 0.6. A seed takes about 65 core-minutes (machine B of
# docs/BENCHMARKS.md, one thread per run, two runs side by side: ~13 minutes per Extractor
# model, ~7 per Transformer).
# Environment: STEPS (default 600), BATCH (32), SEEDS (1; train.seed 1337, 1338, ...: with
# more than one, each seed's runs go to $OUT/seed-S, summary.jsonl has each model's held-out
# bpc per seed and pairs.jsonl a verdict per pair), EXTRA (more `seqmix compare` flags, e.g.
# "--threads 1", as docs/CLAIMS.md's runs), OUT (runs/extractor-moby).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh seqmix_cli
steps=${STEPS:-600}
seeds=${SEEDS:-1}
batch=${BATCH:-32}
out=${OUT:-runs/extractor-moby}
extra=${EXTRA:-}
first_seed=1337
mkdir -p "$out"
[ -f "$out/bpe5000.model" ] ||
  ./build/seqmix tokenizer train --data moby-dick --vocab-size 5000 --out "$out/bpe5000.model"
# table1 = the paper's Table 1 model (m = 6, d = 128, c = 512, l = 128); the presets carry its
# training settings (AdamW lr 1e-3, constant). Runs already finished in $OUT are reused.
./build/seqmix compare --out "$out" --data moby-dick --tokenizer "$out/bpe5000.model" \
  --size table1 --max-steps "$steps" --batch-size "$batch" --seed "$first_seed" \
  --seeds "$seeds" $extra \
  --run "extractor=extractor-transformer" \
  --run "attention-1-head=transformer-plain model.n_heads=1" \
  --run "attention-8-heads=transformer-plain model.n_heads=8" \
  --run "extractor-no-w_opt=extractor-transformer model.extractor.out_proj=false" \
  --run "extractor-no-adjustment=extractor-transformer model.extractor.adjust=false" \
  --run "extractor-no-adjustment-no-w_opt=extractor-transformer model.extractor.adjust=false \
model.extractor.out_proj=false"
# Samples from the first seed's models (compare keeps one seed's runs in $out itself).
runs=$out
[ "$seeds" = 1 ] || runs=$out/seed-$first_seed
for m in extractor attention-1-head attention-8-heads; do
  echo
  echo "== $m: \"Once upon a time\" (top-p 0.6) =="
  ./build/seqmix generate "$runs/$m" --prompt "Once upon a time" --top-p 0.6 --temperature 1 \
    --max-new-tokens 80 --seed 1
done
echo
echo "plot: $runs/compare.png   summary: $out/summary.jsonl"
