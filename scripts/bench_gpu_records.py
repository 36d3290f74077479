#!/usr/bin/env python3
"""The GPU benchmark's records: merges the bench-gpu.jsonl of a GPU run (tests/gpu/bench.py,
written by scripts/gpu-check.sh into its output folder) into docs/bench-gpu.jsonl and prints
them as Markdown tables, one per kind of record. Standard library only.

    python3 scripts/bench_gpu_records.py RUN/bench-gpu.jsonl   # merge, print the tables
    python3 scripts/bench_gpu_records.py                       # print the tables of the docs
    python3 scripts/bench_gpu_records.py --summary RUN/bench-gpu.jsonl   # a run's short tables

Each record is one row of one run, of one of three kinds (field "kind"; a record without it
is a scan record, as every record was before training and generation records existed):

* "scan": one (op, L, dtype, pass) of aib_scan / ces_scan: op, L, B, D, dtype, pass
  ("forward" or "backward"), seqmix_ms, floor_ms, pct_of_floor, compiled_ms, eager_ms,
  fallbacks (the baselines' backward is their fwd+bwd minus their fwd). Key: card, kind, op,
  dtype, L, B, D, pass.
* "train": one (model, L) of whole-model training steps: model, L, batch, d_model,
  n_layers, precision, seqmix_tokens_per_s, pytorch_tokens_per_s (the same model in plain
  PyTorch, compiled), ratio (seqmix / compiled), seqmix_peak_gib, pytorch_peak_gib (each
  side's own peak), seqmix_kernels_per_step, pytorch_kernels_per_step,
  kernel_count_source; optional pytorch_eager_tokens_per_s, seqmix_compiled_tokens_per_s
  (seqmix's modules under torch.compile), ratio_compiled and the per-block kernel counts.
  Key: card, kind, model, L, batch, d_model, precision.
* "generate": one (model, context, batch) of incremental decoding: model, context, batch,
  new_tokens, d_model, n_layers, precision, seqmix_tokens_per_s (seqmix's init_state /
  step), hf_tokens_per_s (transformers' generate of the same model),
  kv_cache_tokens_per_s (seqmix's Transformer, a KV cache, at that context and batch);
  optional hf_kv_cache_tokens_per_s (transformers' GPT-2 with its cache). Key: card, kind,
  model, context, batch, new_tokens, d_model, precision.

Every kind also has card, driver, torch, cuda, date (UTC) and command. A merged record
replaces the one with its key; the others stay. Records of a dry run (CPU, tiny shapes), of
an unknown kind or without their kind's fields are refused, and nothing is written then.
--summary reads records and writes nothing: per kind, short lines (scans: one per op, dtype
and L with forward and backward side by side; gpu-check.sh's last tables).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from jsonl_records import RecordError, read_json_lines  # noqa: E402

DOCS = os.path.normpath(os.path.join(HERE, "..", "docs", "bench-gpu.jsonl"))
MACHINE = ("card", "driver", "torch", "cuda", "date", "command")
FIELDS = ("op", "L", "B", "D", "dtype", "pass", "seqmix_ms", "floor_ms", "pct_of_floor",
          "compiled_ms", "eager_ms", "fallbacks") + MACHINE
TRAIN_FIELDS = ("model", "L", "batch", "d_model", "n_layers", "precision",
                "seqmix_tokens_per_s", "pytorch_tokens_per_s", "ratio", "seqmix_peak_gib",
                "pytorch_peak_gib", "seqmix_kernels_per_step", "pytorch_kernels_per_step",
                "kernel_count_source") + MACHINE
GENERATE_FIELDS = ("model", "context", "batch", "new_tokens", "d_model", "n_layers",
                   "precision", "seqmix_tokens_per_s", "hf_tokens_per_s",
                   "kv_cache_tokens_per_s") + MACHINE
KINDS = {"scan": FIELDS, "train": TRAIN_FIELDS, "generate": GENERATE_FIELDS}
KEY = ("card", "op", "dtype", "L", "B", "D", "pass")
KEYS = {"scan": KEY,
        "train": ("card", "model", "L", "batch", "d_model", "precision"),
        "generate": ("card", "model", "context", "batch", "new_tokens", "d_model",
                     "precision")}
PASSES = {"forward": 0, "backward": 1}


def kind(record):
    """The record's kind: its "kind", "scan" where it has none (the first records)."""
    return record.get("kind", "scan")


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
    k = kind(record)
    if k not in KINDS:
        return [f"kind {k!r} is not scan, train or generate"]
    missing = [f for f in KINDS[k] if f not in record]
    out = [f"missing {', '.join(missing)}"] if missing else []
    if record.get("dry_run"):
        out.append("a dry run (CPU, tiny shapes)")
    if k == "scan" and record.get("pass") not in PASSES:
        out.append(f"pass {record.get('pass')!r} is not forward or backward")
    return out


def describe(record):
    """A record in a few words, for messages."""
    k = kind(record)
    if k == "scan":
        return (f"{record.get('op')} {record.get('dtype')} L={record.get('L')} "
                f"{record.get('pass')}")
    if k == "train":
        return f"train {record.get('model')} L={record.get('L')}"
    if k == "generate":
        return (f"generate {record.get('model')} context={record.get('context')} "
                f"batch={record.get('batch')}")
    return f"kind {k!r}"


def key(record):
    k = kind(record)
    return (k,) + tuple(record.get(f) for f in KEYS[k])


def order(record):
    k = kind(record)
    if k == "scan":
        rest = (record["op"], record["dtype"], record["L"], record["B"], record["D"],
                PASSES.get(record["pass"], 2))
    elif k == "train":
        rest = (record["model"], record["L"], record["batch"], record["d_model"],
                record["precision"])
    else:
        rest = (record["model"], record["batch"], record["context"], record["new_tokens"],
                record["d_model"], record["precision"])
    return (list(KINDS).index(k), record["card"]) + rest


def merge(existing, new):
    """existing with every record of `new` in place of the one with its key."""
    fresh = {key(r): r for r in new}
    kept = [r for r in existing if key(r) not in fresh]
    return sorted(kept + list(fresh.values()), key=order)


def num(x, digits):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b, digits=1):
    return "-" if a is None or not b else f"{a / b:.{digits}f}"


def markdown(records):
    """The Markdown tables of `records`: scans, training, generation (those it has)."""
    parts = [f(rs) for f, rs in ((scan_markdown, [r for r in records if kind(r) == "scan"]),
                                 (train_markdown, [r for r in records if kind(r) == "train"]),
                                 (generate_markdown,
                                  [r for r in records if kind(r) == "generate"])) if rs]
    return "\n\n".join(parts)


def scan_markdown(records):
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


def kilo(x):
    return "-" if x is None else f"{x / 1e3:.1f}"


def count(x):
    return "-" if x is None else str(x)


def train_markdown(records):
    lines = ["| card | model | L | batch | d_model | seqmix ktok/s | seqmix compiled ktok/s "
             "| compiled ktok/s | ratio "
             "| eager ktok/s | seqmix GiB | compiled GiB | seqmix kernels | compiled kernels "
             "| date |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        lines.append(
            f"| {r['card']} | {r['model']} | {r['L']} | {r['batch']} | {r['d_model']} | "
            f"{kilo(r['seqmix_tokens_per_s'])} | "
            f"{kilo(r.get('seqmix_compiled_tokens_per_s'))} | "
            f"{kilo(r['pytorch_tokens_per_s'])} | "
            f"{num(r['ratio'], 2)} | {kilo(r.get('pytorch_eager_tokens_per_s'))} | "
            f"{num(r['seqmix_peak_gib'], 2)} | {num(r['pytorch_peak_gib'], 2)} | "
            f"{count(r['seqmix_kernels_per_step'])} | {count(r['pytorch_kernels_per_step'])} | "
            f"{r['date']} |")
    lines.append("")
    lines.append("Whole-model training steps (forward, backward, AdamW), bf16 autocast; "
                 "thousands of tokens/s, medians. Compiled / eager: the same model written in "
                 "plain PyTorch (Algorithm 1, SDPA), torch.compile'd or not; ratio = seqmix / "
                 "compiled. GiB: each side's peak allocated memory over its own steps. "
                 "Kernels: CUDA kernels launched in one step (torch.profiler).")
    return "\n".join(lines)


def generate_markdown(records):
    lines = ["| card | model | context | batch | new tokens | seqmix tok/s | HF tok/s "
             "| x HF | KV-cache tok/s | x KV | HF GPT-2 KV tok/s | date |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        s, h, k = r["seqmix_tokens_per_s"], r["hf_tokens_per_s"], r["kv_cache_tokens_per_s"]
        lines.append(
            f"| {r['card']} | {r['model']} | {r['context']} | {r['batch']} | "
            f"{r['new_tokens']} | {num(s, 0)} | {num(h, 0)} | {ratio(s, h, 2)} | {num(k, 0)} | "
            f"{ratio(s, k, 2)} | {num(r.get('hf_kv_cache_tokens_per_s'), 0)} | {r['date']} |")
    lines.append("")
    lines.append("Incremental greedy decoding after a prefilled context, bf16 autocast; tokens "
                 "of all sequences per second. seqmix: SequenceModel.init_state / step. HF: "
                 "transformers' generate of the same model (SeqmixForCausalLM, no cache). "
                 "KV cache: seqmix's Transformer decoding at the same context and batch; HF "
                 "GPT-2 KV: transformers' GPT-2 of the same sizes with its cache.")
    return "\n".join(lines)


def summary(records):
    """Short lines per kind: scans one per (op, dtype, L), forward and backward seqmix ms,
    % of floor, x compiled; then training and generation rows (each under 80 columns)."""
    scans = [r for r in records if kind(r) == "scan"]
    trains = [r for r in records if kind(r) == "train"]
    gens = [r for r in records if kind(r) == "generate"]
    lines = []
    if scans:
        rows = {}
        for r in scans:
            rows.setdefault((r.get("op"), r.get("dtype"), r.get("L")), {})[r.get("pass")] = r
        lines.append(f"{'op':8} {'dtype':8} {'L':>5} | {'fwd ms':>8} {'%floor':>6} "
                     f"{'x comp':>6} | {'bwd ms':>8} {'%floor':>6} {'x comp':>6} | {'fb':>3}")
        for (op, dtype, L), passes in rows.items():
            cells = []
            for p in ("forward", "backward"):
                r = passes.get(p, {})
                cells.append(f"{num(r.get('seqmix_ms'), 3):>8} "
                             f"{num(r.get('pct_of_floor'), 1):>6} "
                             f"{ratio(r.get('compiled_ms'), r.get('seqmix_ms')):>6}")
            fb = {str(r.get("fallbacks")) for r in passes.values()}
            lines.append(f"{op:8} {dtype:8} {L:5d} | {cells[0]} | {cells[1]} | "
                         f"{'/'.join(sorted(fb)):>3}")
    if trains:
        lines.append(f"{'train':11} {'L':>6} {'seqmix':>7} {'compiled':>8} {'ratio':>5} "
                     f"{'eager':>7} {'GiB sx':>6} {'GiB pt':>6} {'kern sx':>7} "
                     f"{'kern pt':>7}")
        for r in trains:
            lines.append(
                f"{str(r.get('model')):11} {r.get('L'):6d} "
                f"{kilo(r.get('seqmix_tokens_per_s')):>7} "
                f"{kilo(r.get('pytorch_tokens_per_s')):>8} {num(r.get('ratio'), 2):>5} "
                f"{kilo(r.get('pytorch_eager_tokens_per_s')):>7} "
                f"{num(r.get('seqmix_peak_gib'), 2):>6} {num(r.get('pytorch_peak_gib'), 2):>6} "
                f"{count(r.get('seqmix_kernels_per_step')):>7} "
                f"{count(r.get('pytorch_kernels_per_step')):>7}")
        lines.append("  (train: thousands of tokens/s; compiled (pt), eager: plain PyTorch;"
                     "sx: seqmix)")
    if gens:
        lines.append(f"{'generate':21} {'ctx':>6} {'B':>2} | {'seqmix':>8} {'hf':>8} "
                     f"{'x hf':>5} | {'kv':>8} {'x kv':>5}")
        for r in gens:
            s, h = r.get("seqmix_tokens_per_s"), r.get("hf_tokens_per_s")
            k = r.get("kv_cache_tokens_per_s")
            lines.append(f"{str(r.get('model')):21} {r.get('context'):6d} {r.get('batch'):2d} | "
                         f"{num(s, 0):>8} {num(h, 0):>8} {ratio(s, h, 2):>5} | "
                         f"{num(k, 0):>8} {ratio(s, k, 2):>5}")
        lines.append("  (generate: tokens/s; hf: transformers' generate; kv: seqmix's "
                     "Transformer)")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="bench-gpu.jsonl files of GPU runs")
    parser.add_argument("--docs", default=DOCS, help="the records file (docs/bench-gpu.jsonl)")
    parser.add_argument("--summary", action="store_true",
                        help="print the runs' short tables; write nothing")
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
                print(f"bench_gpu_records: refused {describe(rec)}: {'; '.join(why)}",
                      file=sys.stderr)
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
