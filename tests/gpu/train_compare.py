"""Trains Weird-Net (size mini, byte level) for N steps on a device and on the CPU from the
same seed -- the same initial weights, the same batches -- and compares the loss curves.

    python tests/gpu/train_compare.py --lib build-gpu/libseqmix_ops.so --device cuda \
        --steps 200 --out DIR

Both runs use seqmix's layers on the dispatcher's ops (the CUDA kernels on the device, the
CPU kernels on the CPU), AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1), batch 8 x 256,
gradient clipping at 1.0, float32. Writes DIR/train_compare.json (both curves) and prints the
largest step-wise difference and the difference of the last 20 steps' mean loss. Exits 1 if
the curves disagree: the first step's loss differs by more than 1e-4 (the same computation),
or the last 20 steps' means by more than 2% (float32 rounding in a different order grows
over training, but must not change where it goes).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def train(model, device, steps, data, seed, batch_size, length):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95),
                            weight_decay=0.1)
    losses = []
    for step in range(steps):
        x, y = models.batch(data, step, batch_size, length, seed)
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="", help="libseqmix_ops.so (default: seqmix.nn)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--preset", default="weird-net", choices=sorted(models.MIXERS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    if args.steps < 1:
        sys.exit(f"train_compare: --steps must be >= 1, got {args.steps}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("train_compare: --device cuda, but torch.cuda.is_available() is false")
    models.load_ops(args.lib)
    classes = models.seqmix_classes()
    config = models.model_config(args.preset)
    data = models.corpus()
    torch.manual_seed(args.seed)
    initial = classes["SequenceModel"](config)
    state = {k: v.clone() for k, v in initial.state_dict().items()}
    curves, seconds = {}, {}
    for where in (device, torch.device("cpu")):
        model = classes["SequenceModel"](config)
        model.load_state_dict(state)
        start = time.time()
        curves[where.type] = train(model, where, args.steps, data, args.seed, 8,
                                   config["max_len"])
        seconds[where.type] = time.time() - start
    a, b = curves[device.type], curves["cpu"]
    tail = min(20, len(a))
    first = abs(a[0] - b[0])
    largest = max(abs(x - y) for x, y in zip(a, b))
    end_a, end_b = sum(a[-tail:]) / tail, sum(b[-tail:]) / tail
    end_rel = abs(end_a - end_b) / abs(end_b)
    ok = first <= 1e-4 and end_rel <= 0.02
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "train_compare.json"), "w") as f:
        json.dump({"preset": args.preset, "size": "mini", "steps": args.steps,
                   "seed": args.seed, "losses": curves, "seconds": seconds,
                   "first_step_difference": first, "largest_difference": largest,
                   "last20_mean": {device.type: end_a, "cpu": end_b}, "ok": ok}, f)
    print(f"train_compare: {args.preset} mini, {args.steps} steps: loss {a[0]:.4f} -> "
          f"{end_a:.4f} on {device.type}, {b[0]:.4f} -> {end_b:.4f} on cpu; first step "
          f"differs by {first:.2e}, largest step difference {largest:.2e}, last-20 means by "
          f"{100 * end_rel:.2f}% ({'ok' if ok else 'FAIL'})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
