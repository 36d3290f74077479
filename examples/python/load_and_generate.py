"""Load a run the seqmix command line trained, score it, and generate from it.

    ./build/seqmix train --model weird-net --size mini --data sotu --max-steps 600 --out runs/wn
    PYTHONPATH=build/python .venv/bin/python examples/python/load_and_generate.py runs/wn \
        --prompt "My fellow Americans, " --max-new-tokens 200

seqmix.load reads a run folder, a checkpoint, a `seqmix export` file or a state dict, and
returns a torch.nn.Module with the run's tokenizer; generation decodes incrementally (each
new token costs one step of every layer's cache), as `seqmix generate` does, with the same
output for the same seed.
"""
import argparse

import torch

import seqmix


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", help="run folder or checkpoint file")
    p.add_argument("--prompt", default="The ")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation")
    args = p.parse_args()

    model = seqmix.load(args.run)
    cfg = model.config["model"]
    n = sum(t.numel() for t in model.parameters())
    print(f"{cfg['preset']}/{cfg['size']}: {n / 1e6:.2f}M parameters, max_len {cfg['max_len']},"
          f" tokenizer {model.tokenizer.name}")
    if not args.no_eval:
        r = model.evaluate()
        print(f"held-out ({r['split']}): loss {r['loss']:.4f}  bpc {r['bpc']:.4f}  "
              f"({r['tokens']} tokens)")
    # The model is a torch.nn.Module: logits for any batch of token ids.
    ids = torch.tensor([model.tokenizer.encode(args.prompt)])
    logits = model(ids)
    top = logits[0, -1].softmax(-1).topk(3)
    print("most likely next tokens:",
          ", ".join(f"{model.tokenizer.decode([i])!r} {p:.2f}"
                    for p, i in zip(top.values.tolist(), top.indices.tolist())))
    print(args.prompt + model.generate(args.prompt, args.max_new_tokens,
                                       temperature=args.temperature, top_k=args.top_k,
                                       top_p=args.top_p, seed=args.seed))


if __name__ == "__main__":
    main()
