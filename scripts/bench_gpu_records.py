#!/usr/bin/env python3
"""The GPU benchmark's records: merges the bench-gpu.jsonl of a GPU run (tests/gpu/bench.py,
written by scripts/gpu-check.sh into its output folder) into docs/bench-gpu.jsonl and prints
them as a Markdown table. Standard library only.

    python3 scripts/bench_gpu_records.py RUN/bench-gpu.jsonl   # merge, print the table
    python3 scripts/bench_gpu_records.py                       # print the table of the docs
    python3 scripts/bench_gpu_records.py --summary RUN/bench-gpu.jsonl   # a run's short table

A record is one (op, L, dtype, pass) row of one run: op, L, B, D, dtype, pass ("forward" or
"backward"), seqmix_ms, floor_ms, pct_of_floor, compiled_ms, eager_ms, fallbacks, card,
driver, torch, cuda, date (UTC), command (the baselines' backward is their fwd+bwd minus
their fwd). A merged record replaces the one of the same card, op, dtype, L, B, D and pass;
the others stay. Records of a dry run (CPU, tiny shapes) or without these fields are refused,
and nothing is written then. --summary reads records and writes nothing: one line per op,
dtype and L with forward and backward side by side (gpu-check.sh's last table).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jsonl_records import RecordError, read_json_lines  # noqa: E402

DOCS = os.path.normpath(os.path.join(HERE, "..", "docs", "bench-gpu.jsonl"))
FIELDS = ("op", "L", "B", "D", "dtype", "pass", "seqmix_ms", "floor_ms", "pct_of_floor",
          "compiled_ms", "eager_ms", "fallbacks", "card", "driver", "torch", "cuda", "date",
          "command")
KEY = ("card", "op", "dtype", "L", "B", "D", "pass")
PASSES = {"forward": 0, "backward": 1}


def read(path, missing_ok=False):
    """The records (JSON objects, one a line) of `path`; [] for a missing file where
    missing_ok (the docs' file before its first records)."""
    if missing_ok and not os.path.exists(path):
        return []
    out = []
    for number, value in read_json_lines(path):
        if not isinstance(value, dict):
            raise RecordError(f"{path}, line {number}: not a JSON object")
        out.append(value)
    return out


def problems(record):
    """Why `record` cannot go into the docs ([] when it can)."""
    missing = [f for f in FIELDS if f not in record]
    out = [f"missing {', '.join(missing)}"] if missing else []
    if record.get("dry_run"):
        out.append("a dry run (CPU, tiny shapes)")
    if record.get("pass") not in PASSES:
        out.append(f"pass {record.get('pass')!r} is not forward or backward")
    return out


def order(record):
    return (record["card"], record["op"], record["dtype"], record["L"], record["B"],
            record["D"], PASSES.get(record["pass"], 2))


def merge(existing, new):
    """existing with every record of `new` in place of the one with its key."""
    fresh = {tuple(r[k] for k in KEY): r for r in new}
    kept = [r for r in existing if tuple(r.get(k) for k in KEY) not in fresh]
    return sorted(kept + list(fresh.values()), key=order)


def num(x, digits):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b, digits=1):
    return "-" if a is None or not b else f"{a / b:.{digits}f}"


def markdown(records):
    lines = ["| card | op | dtype | L | pass | seqmix ms | floor ms | % of floor | compiled ms "
             "| x compiled | eager ms | fallbacks | date |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        lines.append(
            f"| {r['card']} | {r['op']} | {r['dtype']} | {r['L']} | {r['pass']} | "
            f"{num(r['seqmix_ms'], 3)} | {num(r['floor_ms'], 3)} | {num(r['pct_of_floor'], 1)} | "
            f"{num(r['compiled_ms'], 2)} | {ratio(r['compiled_ms'], r['seqmix_ms'])} | "
            f"{num(r['eager_ms'], 2)} | {'-' if r['fallbacks'] is None else r['fallbacks']} | "
            f"{r['date']} |")
    if records:
        lines.append("")
        shapes = {(r["B"], r["D"]) for r in records}
        shape = (f"B = {records[0]['B']}, D = {records[0]['D']}" if len(shapes) == 1
                 else "B and D as in docs/bench-gpu.jsonl")
        lines.append(f"{shape}; medians of CUDA-event "
                     "timings. Floor: the bytes the pass must move at the device-to-device copy "
                     "rate of the same run. Compiled / eager: the papers' algorithms in PyTorch; "
                     "their backward is their fwd+bwd minus their fwd. Fallbacks: "
                     "aib_scan_fallbacks() during the case.")
    return "\n".join(lines)


def summary(records):
    """One line per (op, dtype, L): forward and backward seqmix ms, % of floor, x compiled."""
    rows = {}
    for r in records:
        rows.setdefault((r.get("op"), r.get("dtype"), r.get("L")), {})[r.get("pass")] = r
    lines = [f"{'op':9} {'dtype':8} {'L':>6} | {'fwd ms':>8} {'%floor':>6} {'x comp':>6} | "
             f"{'bwd ms':>8} {'%floor':>6} {'x comp':>6} | {'fallbacks':>9}"]
    for (op, dtype, L), passes in rows.items():
        cells = []
        for p in ("forward", "backward"):
            r = passes.get(p, {})
            cells.append(f"{num(r.get('seqmix_ms'), 3):>8} {num(r.get('pct_of_floor'), 1):>6} "
                         f"{ratio(r.get('compiled_ms'), r.get('seqmix_ms')):>6}")
        fb = {str(r.get("fallbacks")) for r in passes.values()}
        lines.append(f"{op:9} {dtype:8} {L:6d} | {cells[0]} | {cells[1]} | "
                     f"{'/'.join(sorted(fb)):>9}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="bench-gpu.jsonl files of GPU runs")
    parser.add_argument("--docs", default=DOCS, help="the records file (docs/bench-gpu.jsonl)")
    parser.add_argument("--summary", action="store_true",
                        help="print the runs' short table; write nothing")
    args = parser.parse_args()
    try:
        new = [r for path in args.runs for r in read(path)]
        if args.summary:
            print(summary(new) if new else "bench-gpu records: none")
            return
        refused = [(i, why) for i, r in enumerate(new) if (why := problems(r))]
        if refused:
            for i, why in refused:
                rec = new[i]
                print(f"bench_gpu_records: refused {rec.get('op')} {rec.get('dtype')} "
                      f"L={rec.get('L')} {rec.get('pass')}: {'; '.join(why)}", file=sys.stderr)
            sys.exit(1)
        records = read(args.docs, missing_ok=True)
        if new:
            records = merge(records, new)
            tmp = args.docs + ".tmp"
            with open(tmp, "w") as f:
                for r in records:
                    f.write(json.dumps(r, sort_keys=True) + "\n")
            os.replace(tmp, args.docs)
            print(f"bench_gpu_records: {len(new)} records merged into {args.docs} "
                  f"({len(records)} in all)", file=sys.stderr)
    except RecordError as e:
        sys.exit(f"bench_gpu_records: {e}")
    print(markdown(records) if records else f"bench-gpu records: none in {args.docs}")


if __name__ == "__main__":
    main()
