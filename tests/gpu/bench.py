"""The GPU benchmark of docs/CUDA.md ("The benchmark"): CUDA events, medians.

    python tests/gpu/bench.py --lib build-gpu/libseqmix_ops.so --out DIR [--budget 240]

1. Device-to-device copy rate (bytes read + written per second): the bandwidth ceiling.
2. The AIB scan, forward + backward, B = 4, D = 512, float32, L = 4K .. 64K: seqmix's kernel
   against the papers' Algorithm 1 in PyTorch (seqmix._torch_ops.aib_scan: the shift-and-add
   levels) eager and torch.compile'd, and against the memory-bandwidth floor: 8 arrays of
   B L D float32 (forward reads A, V and writes O; backward reads dO, A, V and writes dA,
   dV), each moved once, at the measured copy rate.
3. The CES scan, forward + backward, same shapes: seqmix's kernel against the authors' FFT
   form (seqmix._torch_ops.ces_scan), eager and compiled.
4. Whole-model training steps (forward, backward, AdamW; bf16 autocast; batch 4; d_model
   256, 4 layers, 4 heads, d_ff 1024) of Weird-Net, Weird-Net-A and the Transformer at
   L = 4K and 16K: tokens/s of seqmix's modules against the same models written by a user in
   PyTorch (tests/gpu/models.py's UserOps: Algorithm 1, attention by SDPA), compiled.

Cases past --budget seconds are skipped and listed as such. Writes DIR/bench.json and prints
the tables.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def timed(fn, repeats, warmup=3):
    """Median milliseconds of fn() over `repeats` runs, CUDA events around each."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_rate(device):
    n = 512 * 1024 * 1024  # 2 GiB of float32 each way
    src = torch.empty(n, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), 20)
    return 2 * n * 4 / (ms / 1e3)


def fwd_bwd(op, inputs, grad):
    def run():
        out = op(*inputs)
        torch.autograd.grad(out, [t for t in inputs if isinstance(t, torch.Tensor) and
                                  t.requires_grad], grad)
    return run


def scan_rows(device, rate, budget_end, rows, skipped):
    from seqmix import _layers, _torch_ops
    ops = torch.ops.seqmix
    B, D = 4, 512
    compiled_aib = torch.compile(_torch_ops.aib_scan, dynamic=False)
    compiled_ces = torch.compile(_torch_ops.ces_scan, dynamic=False)
    for L in (4096, 16384, 65536):
        if time.time() > budget_end:
            skipped.append(f"scans at L={L}")
            continue
        K = (L - 1).bit_length()
        a = torch.randn(B, L, D, device=device, requires_grad=True)
        v = torch.randn(B, L, D, device=device, requires_grad=True)
        w = (-0.3 + 0.1 * torch.randn(K, D, device=device)).requires_grad_()
        g = torch.randn(B, L, D, device=device)
        floor_ms = 8 * B * L * D * 4 / rate * 1e3
        row = {"op": "aib_scan", "L": L, "floor_ms": floor_ms}
        row["seqmix_ms"] = timed(fwd_bwd(lambda a, v, w: ops.aib_scan(a, v, w, None, "causal",
                                                                      "prefix_exp"),
                                         (a, v, w), g), 20)
        row["eager_ms"] = timed(fwd_bwd(_torch_ops.aib_scan, (a, v, w), g), 5)
        row["compiled_ms"] = timed(fwd_bwd(compiled_aib, (a, v, w), g), 5)
        rows.append(row)
        del a, v, w
        C = D
        _, mu, c = _layers.ces_coefficients(torch.randn(C, 2, device=device),
                                            torch.full((C, 2), -3.0, device=device),
                                            0.2 * torch.randn(C, 2, device=device))
        mu, c = mu.detach().requires_grad_(), c.detach().requires_grad_()
        x = torch.randn(B, L, D, device=device, requires_grad=True)
        row = {"op": "ces_scan", "L": L, "floor_ms": 6 * B * L * D * 4 / rate * 1e3}
        row["seqmix_ms"] = timed(fwd_bwd(lambda x, mu, c: ops.ces_scan(x, mu, c, None, "causal"),
                                         (x, mu, c), g), 20)
        row["eager_ms"] = timed(fwd_bwd(_torch_ops.ces_scan, (x, mu, c), g), 5)
        row["compiled_ms"] = timed(fwd_bwd(compiled_ces, (x, mu, c), g), 5)
        rows.append(row)
        del x, g
        torch.cuda.empty_cache()


def model_rows(device, budget_end, rows, skipped):
    ours, users = models.seqmix_classes(), models.pytorch_classes()
    B = 4
    for L in (4096, 16384):
        for preset in ("weird-net", "weird-net-a", "transformer"):
            if time.time() > budget_end:
                skipped.append(f"{preset} training at L={L}")
                continue
            config = models.model_config(preset, max_len=L, d_model=256, n_layers=4,
                                         n_heads=4, d_ff=1024)
            tokens = torch.randint(0, 256, (B, L + 1), device=device)
            row = {"model": preset, "L": L, "batch": B}
            for name, classes, compiled in (("seqmix", ours, False), ("pytorch", users, True)):
                torch.manual_seed(0)
                model = classes["SequenceModel"](config).to(device)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
                fwd = torch.compile(model, dynamic=False) if compiled else model

                def step():
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        logits = fwd(tokens[:, :-1])
                        loss = torch.nn.functional.cross_entropy(
                            logits.reshape(-1, logits.shape[-1]).float(),
                            tokens[:, 1:].reshape(-1))
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                try:
                    ms = timed(step, 10)
                    row[f"{name}_tokens_per_s"] = B * L / (ms / 1e3)
                    row[f"{name}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
                except torch.OutOfMemoryError:
                    row[f"{name}_tokens_per_s"] = None
                del model, opt, fwd
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            rows.append(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="", help="libseqmix_ops.so (default: seqmix.nn)")
    parser.add_argument("--out", default=".")
    parser.add_argument("--budget", type=float, default=240, help="seconds for all cases")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench: needs a CUDA device (torch.cuda.is_available() is false)")
    models.load_ops(args.lib)
    device = torch.device("cuda")
    budget_end = time.time() + args.budget
    rate = copy_rate(device)
    scans, trains, skipped = [], [], []
    scan_rows(device, rate, budget_end, scans, skipped)
    model_rows(device, budget_end, trains, skipped)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "copy_tb_per_s": rate / 1e12, "scans": scans,
            "training": trains, "skipped": skipped}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"{info['device']}, PyTorch {info['torch']} (CUDA {info['cuda']}); copy "
          f"{info['copy_tb_per_s']:.2f} TB/s (read + written)")
    print(f"{'op':9} {'L':>6} {'seqmix ms':>10} {'eager':>8} {'compiled':>9} "
          f"{'x compiled':>10} {'% floor':>8}")
    for r in scans:
        print(f"{r['op']:9} {r['L']:6d} {r['seqmix_ms']:10.3f} {r['eager_ms']:8.2f} "
              f"{r['compiled_ms']:9.2f} {r['compiled_ms'] / r['seqmix_ms']:10.1f} "
              f"{100 * r['floor_ms'] / r['seqmix_ms']:8.1f}")
    print(f"{'model':12} {'L':>6} {'seqmix tok/s':>13} {'pytorch tok/s':>14} {'ratio':>6}")
    for r in trains:
        s, p = r.get("seqmix_tokens_per_s"), r.get("pytorch_tokens_per_s")
        ratio = f"{s / p:6.2f}" if s and p else "     -"
        print(f"{r['model']:12} {r['L']:6d} {s or 0:13.0f} {p or 0:14.0f} {ratio}")
    for s in skipped:
        print(f"skipped (budget): {s}")


if __name__ == "__main__":
    main()
