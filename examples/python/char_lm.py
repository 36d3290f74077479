"""A character-level language model trained with a plain PyTorch loop on a seqmix model.

    PYTHONPATH=build/python .venv/bin/python examples/python/char_lm.py TEXT_FILE RUN_DIR \
        [--model weird-net] [--size tiny] [--steps 200]

The model is seqmix's (built by seqmix.build from a preset), the loop is yours: batches of
random crops, torch.optim.AdamW, cross-entropy on the next byte. At the end the model is
saved as a run folder that the command line reads:

    ./build/seqmix eval RUN_DIR                       # held-out bits per character
    ./build/seqmix generate RUN_DIR --prompt "The "   # text
    ./build/seqmix train --out RUN_DIR --resume --max-steps 400   # train further
"""
import argparse
import math
import os
import time

import torch
import torch.nn.functional as F

import seqmix


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("text", help="a UTF-8 text file; its last 10%% (at a line start) is held out")
    p.add_argument("out", help="run folder to write (must not hold a run)")
    p.add_argument("--model", default="weird-net", help="seqmix preset (seqmix info)")
    p.add_argument("--size", default="tiny")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = one per core)")
    args = p.parse_args()
    if args.steps < 1 or args.batch_size < 1 or args.max_len < 2 or args.threads < 0:
        p.error("--steps and --batch-size must be >= 1, --max-len >= 2, --threads >= 0")
    torch.set_num_threads(args.threads or os.cpu_count() or 1)

    data = open(args.text, "rb").read()
    cut = data.rfind(b"\n", 0, int(0.9 * len(data))) + 1  # seqmix's split of a text file
    train = torch.tensor(list(data[:cut]), dtype=torch.int64)
    if len(train) <= args.max_len + 1:
        p.error(f"{args.text}: too short for --max-len {args.max_len}")

    # data.source tells the saved run which corpus `seqmix eval` scores.
    model = seqmix.build(args.model, args.size, max_len=args.max_len, seed=args.seed,
                         **{"data.source": args.text, "train.lr": args.lr,
                            "train.batch_size": args.batch_size})
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.model}/{args.size}: {n_params / 1e6:.2f}M parameters, "
          f"{len(train)} training bytes, threads {torch.get_num_threads()}")

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        start = torch.randint(len(train) - args.max_len - 1, (args.batch_size,), generator=g)
        batch = torch.stack([train[s:s + args.max_len + 1] for s in start.tolist()])
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % max(1, args.steps // 10) == 0 or step == args.steps:
            print(f"step {step:5d}  loss {loss.item():.4f}  bpc {loss.item() / math.log(2):.3f}"
                  f"  {time.time() - t0:.1f} s")

    model.eval()
    held = model.evaluate()
    print(f"held-out: bpc {held['bpc']:.4f} over {held['tokens']} bytes")
    print("sample:", repr(model.generate("The ", 80, temperature=0.8, top_p=0.95, seed=1)))
    model.save(args.out, step=args.steps)
    print(f"saved {args.out}: try  seqmix eval {args.out}")


if __name__ == "__main__":
    main()
