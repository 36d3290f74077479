#!/usr/bin/env bash
# Behaviour check for refactors: trains the README demo's model and three LRA cells (AIB,
# ETSMLP and Extractor mixers, and softmax attention inside the demo's Weird-Net) for a few
# steps with two seqmix binaries from the same seeds, then compares every logged training
# and evaluation loss; they must agree to 1e-6.
#   bash scripts/same-losses.sh OLD_SEQMIX NEW_SEQMIX [OUT]
# OLD_SEQMIX is typically a build of the commit before the change (git worktree add).
set -euo pipefail
old=$1 new=$2 out=${3:-/tmp/same-losses}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# LRA cells: 60 steps on 1,000 training examples, 200 to evaluate, so each takes a minute.
lra="--max-steps 60 --set train.log_interval=10 --set train.eval_interval=60"
lra+=" --set data.train_examples=1000 --set data.valid_examples=200 --set data.test_examples=200"
runs=(
  "demo|--model weird-net --size mini --data sotu --max-steps 200 --set train.eval_interval=100 --set train.eval_max_bytes=65536 --set train.log_interval=25"
  "listops|--task listops --model weird-net-a $lra"
  "text|--task text --model etsmlp $lra"
  "image|--task image --model extractor-transformer $lra"
)
mkdir -p "$out"
for which in old new; do
  bin=${!which}
  for r in "${runs[@]}"; do
    name=${r%%|*} args=${r#*|}
    dir="$out/$which-$name"
    rm -rf "$dir"
    # shellcheck disable=SC2086
    (cd "$here" && SEQMIX_DATA_DIR="$here/data" "$bin" train $args --seed 1337 --threads 2 \
      --out "$dir" > "$dir.log" 2>&1) ||
      { echo "$which $name failed: $dir.log"; exit 1; }
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
worst, bad = 0.0, False
for name in ("demo", "listops", "text", "image"):
    def losses(which):
        rows = [json.loads(l) for l in open(f"{out}/{which}-{name}/metrics.jsonl")]
        return [(r.get("split", "train"), r.get("step"), r["loss"]) for r in rows if "loss" in r]
    a, b = losses("old"), losses("new")
    if [x[:2] for x in a] != [x[:2] for x in b] or not a:
        print(f"{name}: different rows logged"); bad = True; continue
    d = max(abs(x[2] - y[2]) for x, y in zip(a, b))
    worst = max(worst, d)
    print(f"{name:8s} {len(a):3d} losses, largest difference {d:.2e}")
print(f"largest difference {worst:.2e}:", "same to 1e-6" if worst <= 1e-6 and not bad else "DIFFERENT")
sys.exit(1 if bad or worst > 1e-6 else 0)
PY
