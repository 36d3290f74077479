"""Nsight Compute's view of one aib_scan and one ces_scan forward + backward (B = 4,
L = 16384, D = 512, float32): per kernel, DRAM bytes read and written, time, DRAM throughput.

    ncu --profile-from-start off --csv --log-file RAW.csv --metrics METRICS \\
        python tests/gpu/ncu_scans.py --lib build-gpu/libseqmix_ops.so
    python tests/gpu/ncu_scans.py --parse RAW.csv        # the per-kernel table, stdlib only

(scripts/gpu-check.sh runs both, METRICS = ncu_scans.METRICS.) The run warms every op up
unprofiled, then brackets each op's forward + backward with cudaProfilerStart/Stop, so the
profile holds exactly the kernels of those calls -- seqmix's and the ATen kernels the ops
launch (gradient scratch fills, reductions), which a kernel-name filter would miss -- and
runs each op on a stream of its own, in the order of OPS, so that the parser attributes
kernels to ops by ncu's "Stream" column. --device cpu runs the same calls on the CPU (the
test of this script without a GPU).
"""
import argparse
import csv
import os
import sys

METRICS = ("dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,"
           "dram__throughput.avg.pct_of_peak_sustained_elapsed")
OPS = ("aib_scan", "ces_scan")
SHAPE = dict(B=4, L=16384, D=512)

# ncu prints values in scaled units unless told --print-units base; both are read.
_BYTES = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3}
_SECONDS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3,
            "ms": 1e-3, "second": 1, "s": 1}


def run(lib, device_name):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models
    models.load_ops(lib)
    from seqmix.mixers.ces import ces_coefficients
    device = torch.device(device_name)
    ops = torch.ops.seqmix
    B, L, D = (SHAPE[k] for k in "BLD") if device.type == "cuda" else (2, 64, 8)
    K = max(1, (L - 1).bit_length())
    torch.manual_seed(0)
    a, v, x, g = (torch.randn(B, L, D, device=device) for _ in range(4))
    w = -0.3 + 0.1 * torch.randn(K, D, device=device)
    _, mu, c = ces_coefficients(torch.randn(D, 2, device=device),
                                        torch.full((D, 2), -3.0, device=device),
                                        0.2 * torch.randn(D, 2, device=device))
    calls = {
        "aib_scan": ((a, v, w), lambda a, v, w: ops.aib_scan(a, v, w, None, "causal",
                                                             "prefix_exp")),
        "ces_scan": ((x, mu.detach(), c.detach()),
                     lambda x, mu, c: ops.ces_scan(x, mu, c, None, "causal")),
    }

    def fwd_bwd(name):
        inputs, fn = calls[name]
        inputs = [t.detach().requires_grad_() for t in inputs]
        torch.autograd.grad(fn(*inputs), inputs, g)

    for name in OPS:  # warm-up, unprofiled: lazy initialisation, the allocator's blocks
        fwd_bwd(name)
    cuda = device.type == "cuda"
    streams = {name: torch.cuda.Stream() for name in OPS} if cuda else {}
    if cuda:
        torch.cuda.synchronize()
    for name in OPS:
        if cuda:
            streams[name].wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(streams[name]):
                torch.cuda.profiler.start()
                fwd_bwd(name)
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
        else:
            fwd_bwd(name)
        print(f"ncu_scans: ran {name} forward + backward, B={B} L={L} D={D} float32 on {device}",
              flush=True)


def number(text):
    """A metric value as ncu prints it ("1,234.5"; "n/a" -> None)."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse(text):
    """ncu's --csv details (one row per kernel and metric) -> kernels in launch order:
    [{"id", "name", "stream", "read_bytes", "write_bytes", "seconds", "dram_pct"}]."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting '\"ID\",') in the log")
    rows = csv.DictReader([line for line in lines[start:] if line.startswith('"')])
    kernels = {}
    for row in rows:
        if not row.get("ID") or not row.get("Metric Name"):
            continue
        k = kernels.setdefault(row["ID"], {"id": int(number(row["ID"]) or 0),
                                           "name": row.get("Kernel Name", ""),
                                           "stream": row.get("Stream", ""),
                                           "read_bytes": None, "write_bytes": None,
                                           "seconds": None, "dram_pct": None})
        metric, unit = row["Metric Name"], (row.get("Metric Unit") or "").strip().lower()
        value = number(row.get("Metric Value", ""))
        if value is None:
            continue
        if metric == "dram__bytes_read.sum":
            k["read_bytes"] = value * _BYTES.get(unit, 1)
        elif metric == "dram__bytes_write.sum":
            k["write_bytes"] = value * _BYTES.get(unit, 1)
        elif metric == "gpu__time_duration.sum":
            k["seconds"] = value * _SECONDS.get(unit, 1e-9)
        elif metric == "dram__throughput.avg.pct_of_peak_sustained_elapsed":
            k["dram_pct"] = value
    return sorted(kernels.values(), key=lambda k: k["id"])


def by_op(kernels):
    """{op: kernels}: the streams in order of first appearance are OPS's, in order (each op
    ran on its own stream); a profile with another number of streams is one group."""
    streams = []
    for k in kernels:
        if k["stream"] not in streams:
            streams.append(k["stream"])
    if len(streams) != len(OPS):
        return {" + ".join(OPS) + " (not told apart by stream)": kernels}
    return {op: [k for k in kernels if k["stream"] == s] for op, s in zip(OPS, streams)}


def short(name, width=60):
    """A demangled kernel name without "void ", anonymous namespaces and its argument list."""
    name = name.replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name if len(name) <= width else name[:width - 3] + "..."


def moved(k):
    """DRAM bytes read + written by kernel k (None where ncu gave neither)."""
    if k["read_bytes"] is None and k["write_bytes"] is None:
        return None
    return (k["read_bytes"] or 0) + (k["write_bytes"] or 0)


def report(kernels):
    """The per-kernel table and one summary line per op (lines starting "ncu:")."""
    out = [f"{'kernel':60} {'time us':>9} {'read MB':>9} {'write MB':>9} {'GB/s':>8} "
           f"{'DRAM %peak':>10}"]
    summary = []
    shape = f"B={SHAPE['B']} L={SHAPE['L']} D={SHAPE['D']} float32"
    for op, ks in by_op(kernels).items():
        out.append(f"-- {op} forward + backward ({shape}): {len(ks)} kernels")
        for k in ks:
            rate = moved(k) / k["seconds"] / 1e9 if moved(k) is not None and k["seconds"] else None
            cells = ((k["seconds"] * 1e6 if k["seconds"] is not None else None, 9, 1),
                     (k["read_bytes"] / 1e6 if k["read_bytes"] is not None else None, 9, 1),
                     (k["write_bytes"] / 1e6 if k["write_bytes"] is not None else None, 9, 1),
                     (rate, 8, 0), (k["dram_pct"], 10, 1))
            out.append(f"{short(k['name']):60} " + " ".join(
                f"{x:{w}.{d}f}" if x is not None else f"{'-':>{w}}" for x, w, d in cells))
        seconds = sum(k["seconds"] or 0 for k in ks)
        total = sum(moved(k) or 0 for k in ks)
        top = sorted(ks, key=lambda k: -(k["seconds"] or 0))[:4]
        summary.append(
            f"ncu: {op} fwd+bwd ({shape}): {len(ks)} kernels, {seconds * 1e3:.3f} ms, "
            f"DRAM {total / 1e6:.0f} MB = {total / seconds / 1e9 if seconds else 0:.0f} GB/s; "
            "longest: " + ", ".join(
                f"{short(k['name'], 40)} {(k['seconds'] or 0) * 1e6:.0f} us"
                + (f" {k['dram_pct']:.0f}% of DRAM peak" if k["dram_pct"] is not None else "")
                for k in top))
    return out, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="", help="libseqmix_ops.so (default: seqmix.nn)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--parse", metavar="RAW", help="print the table of ncu's CSV log RAW")
    args = parser.parse_args()
    if not args.parse:
        run(args.lib, args.device)
        return
    try:
        kernels = parse(open(args.parse, errors="replace").read())
    except (OSError, ValueError) as e:
        print(f"ncu: no profile to read ({e})")
        sys.exit(1)
    if not kernels:
        print("ncu: the profile holds no kernel")
        sys.exit(1)
    table, summary = report(kernels)
    print("\n".join(summary + [""] + table))


if __name__ == "__main__":
    main()
