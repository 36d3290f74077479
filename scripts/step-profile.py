"""Where one training step's time goes: self CPU time by operator (torch.profiler) for the
seqmix model and the eager PyTorch model of seqmix.bench_anchors, and the share in the
matrix products and in PyTorch's SDPA, the kernels both sides call alike.

    PYTHONPATH=build/python .venv/bin/python scripts/step-profile.py \\
        [--shape 1024x8x256] [--precision fp32] MODEL [MODEL ...]

MODEL: weird-net, weird-net-a or transformer. Each side runs 2 warm-up steps, then 3
profiled steps, on all cores (docs/BENCHMARKS.md, "Against PyTorch 2.11").
"""
import argparse
import os

import torch
from torch.profiler import ProfilerActivity, profile

from seqmix import bench_anchors as ba

GEMM = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
SDPA = ("aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", choices=sorted(ba.MODEL_MIXERS))
    p.add_argument("--shape", type=ba.shape_list, default=[(1024, 8, 256)],
                   help="LxBxD (default 1024x8x256)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    (L, B, D), = args.shape[:1]
    for name in args.models:
        runners, errors = ba.model_runners(name, L, B, D, args.precision, 0, with_compile=False)
        for side in ("eager", "seqmix"):
            if side not in runners:
                print(f"{name} {side}: {errors.get(side)}")
                continue
            step = runners[side]
            for _ in range(2):
                step()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    step()
            ev = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in ev)
            gemm = sum(e.self_cpu_time_total for e in ev if e.key in GEMM)
            sdpa = sum(e.self_cpu_time_total for e in ev if e.key in SDPA)
            top = sorted(ev, key=lambda e: -e.self_cpu_time_total)[:6]
            print(f"{name} {side}: matrix products {100 * gemm / total:.1f}%, "
                  f"SDPA {100 * sdpa / total:.1f}%; largest: " +
                  ", ".join(f"{e.key} {100 * e.self_cpu_time_total / total:.0f}%" for e in top),
                  flush=True)


if __name__ == "__main__":
    main()
