"""seqmix's AIB attention dropped into an existing PyTorch model.

    PYTHONPATH=build/python .venv/bin/python examples/python/aib_in_pytorch.py [--steps 300]

A small sequence tagger -- nn.Embedding, a mixing layer, nn.Linear -- learns to output, at
every position, the token that came `lag` positions earlier (a task a position-wise model
cannot solve). The mixing layer is seqmix.nn.AIBAttention (Weird-Net's causal AIB attention,
the fused C++ kernel with its own backward) or, for comparison, torch's
nn.MultiheadAttention; nothing else changes. Parameters, optimiser, state_dict and
.to(dtype) are plain PyTorch.
"""
import argparse
import time

import torch
import torch.nn.functional as F

import seqmix.nn


class Tagger(torch.nn.Module):
    def __init__(self, vocab, d_model, max_len, mixer):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d_model)
        self.pos = torch.nn.Parameter(0.02 * torch.randn(max_len, d_model))
        self.kind = mixer
        if mixer == "aib":
            self.mix = seqmix.nn.AIBAttention(d_model, max_len)          # [B, L, D] -> [B, L, D]
        else:
            self.mix = torch.nn.MultiheadAttention(d_model, 4, batch_first=True)
        self.norm = torch.nn.LayerNorm(d_model)
        self.out = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        if self.kind == "aib":
            x = x + self.mix(x)
        else:
            L = tokens.shape[1]
            causal = torch.ones(L, L, dtype=torch.bool).triu(1)
            x = x + self.mix(x, x, x, attn_mask=causal, need_weights=False)[0]
        return self.out(self.norm(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lag", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps < 1 or not 0 < args.lag < args.seq_len:
        p.error("--steps must be >= 1 and 0 < --lag < --seq-len")
    vocab, d_model = 16, 64
    for kind in ("aib", "torch"):
        torch.manual_seed(args.seed)
        model = Tagger(vocab, d_model, args.seq_len, kind)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        t0 = time.time()
        for step in range(1, args.steps + 1):
            tokens = torch.randint(vocab, (32, args.seq_len))
            target = torch.roll(tokens, args.lag, 1)
            logits = model(tokens)[:, args.lag:]
            loss = F.cross_entropy(logits.flatten(0, 1), target[:, args.lag:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            tokens = torch.randint(vocab, (256, args.seq_len))
            pred = model(tokens)[:, args.lag:].argmax(-1)
            acc = (pred == torch.roll(tokens, args.lag, 1)[:, args.lag:]).float().mean().item()
        name = "seqmix.nn.AIBAttention" if kind == "aib" else "nn.MultiheadAttention"
        print(f"{name:24s} loss {loss.item():.4f}  accuracy {acc:.3f}  "
              f"{time.time() - t0:.1f} s  ({sum(p.numel() for p in model.parameters())} "
              "parameters)")


if __name__ == "__main__":
    main()
