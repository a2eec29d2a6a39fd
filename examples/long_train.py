"""A long plain-PyTorch training job: an nn.Transformer encoder-decoder (translation-shaped) trained on synthetic
token pairs in length buckets with token-budget batching, AdamW, bf16 autocast on CUDA.

A step's source and target lengths are a pair of buckets (multiples of --bucket up to --max-len), and it takes
as many sequence pairs as fit the token budget, the way length-bucketed seq2seq training batches. An epoch visits
every pair of buckets once, in a seeded shuffled order (256 steps at the defaults), so the shapes change every step
while any whole number of epochs does the same work as any other, and a few hundred steps nearly so: there are no
phases (no evaluation, no checkpoints, a constant learning rate). It prints a progress line every --log-every steps
and nothing else per step.

    python3 examples/long_train.py [--steps 3072] [--tokens 16384] [--layers 6] [--d-model 1024] ...

Defaults: 6 encoder and 6 decoder layers of width 1024 (~280M parameters with the 32k vocabularies), lengths
64-1024 in buckets of 64, 16384 tokens per side per step.
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from torch import nn


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3072, help="training steps (12 epochs at the defaults)")
    p.add_argument("--layers", type=int, default=6, help="encoder layers, and as many decoder layers")
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000, help="source and target vocabulary size")
    p.add_argument("--max-len", type=int, default=1024, help="longest source or target")
    p.add_argument("--bucket", type=int, default=64, help="lengths are multiples of this")
    p.add_argument("--tokens", type=int, default=16384, help="token budget: pairs per step = this // longer side")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=256, help="print the throughput every N steps (0: never)")
    return p.parse_args(argv)


class Seq2Seq(nn.Module):
    """Source and target embeddings (with learned positions), nn.Transformer, a target-vocabulary head."""

    def __init__(self, args: argparse.Namespace):
        super().__init__()
        d = args.d_model
        self.src_tokens, self.tgt_tokens = nn.Embedding(args.vocab, d), nn.Embedding(args.vocab, d)
        self.positions = nn.Embedding(args.max_len, d)
        self.transformer = nn.Transformer(d, args.heads, args.layers, args.layers, 4 * d, dropout=0.0,
                                          activation="gelu", batch_first=True)
        self.head = nn.Linear(d, args.vocab, bias=False)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        pos = self.positions.weight
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        x = self.transformer(self.src_tokens(src) + pos[:src.shape[1]], self.tgt_tokens(tgt) + pos[:tgt.shape[1]],
                             tgt_mask=mask, tgt_is_causal=True)
        return self.head(x)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    model = Seq2Seq(args).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rng, data = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    buckets = range(args.bucket, args.max_len + 1, args.bucket)
    shapes = [(src_len, tgt_len) for src_len in buckets for tgt_len in buckets]
    params = sum(p.numel() for p in model.parameters())
    print(f"seq2seq transformer: {params / 1e6:.1f}M parameters on {device}, {args.steps} steps, "
          f"{len(shapes)} steps an epoch", flush=True)
    start, tokens = time.perf_counter(), 0
    for i in range(args.steps):
        if i % len(shapes) == 0:
            rng.shuffle(shapes)   # an epoch: every pair of length buckets once, in a new order
        src_len, tgt_len = shapes[i % len(shapes)]
        pairs = max(1, args.tokens // max(src_len, tgt_len))
        src = torch.randint(args.vocab, (pairs, src_len), generator=data).to(device)
        tgt = torch.randint(args.vocab, (pairs, tgt_len + 1), generator=data).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(src, tgt[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += pairs * (src_len + tgt_len)
        if args.log_every and (i + 1) % args.log_every == 0:
            rate = tokens / (time.perf_counter() - start)
            print(f"step {i + 1}/{args.steps} loss {loss.item():.3f} {rate:,.0f} tokens/s", flush=True)
    if device.type == "cuda":
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    print(f"done, {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
