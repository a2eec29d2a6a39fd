"""Train a causal transformer language model written in plain PyTorch (no library but torch), the way a small
training script does it: token batches made on the host and moved to the GPU, `F.scaled_dot_product_attention`,
AdamW, optionally bf16 autocast, activation checkpointing of every block, or a sequence length drawn per step.

    python3 examples/gpt_train.py [--batch 16] [--seq 1024] [--steps 10] [--checkpoint] [--autocast] [--varlen]

Defaults: a GPT-2 small shape (12 layers, width 768, vocabulary 32000, ~110M parameters), 16 sequences of 1024
tokens a step, fp32. `--checkpoint` recomputes each block in the backward pass (torch.utils.checkpoint, non-reentrant);
`--autocast` runs forward and loss under bf16 autocast; `--varlen` draws each step's sequence length from a seeded RNG
between a quarter of --seq and --seq.
"""
from __future__ import annotations

import argparse
import random
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="training steps")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence (the longest, with --varlen)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--checkpoint", action="store_true", help="recompute every block in the backward pass")
    p.add_argument("--autocast", action="store_true", help="bf16 autocast for forward and loss")
    p.add_argument("--varlen", action="store_true", help="draw each step's sequence length")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=5, help="print the loss every N steps (0: never)")
    return p.parse_args(argv)


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class LM(nn.Module):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.d_model)
        self.pos = nn.Embedding(args.seq, args.d_model)
        self.blocks = nn.ModuleList(Block(args.d_model, args.heads) for _ in range(args.layers))
        self.norm = nn.LayerNorm(args.d_model)
        self.head = nn.Linear(args.d_model, args.vocab, bias=False)
        self.recompute = args.checkpoint

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        return self.head(self.norm(x))


def main(argv=None) -> None:
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    draw = random.Random(args.seed)
    model = LM(args).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    print(f"LM: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}, batch {args.batch}, "
          f"seq {args.seq}{' (drawn)' if args.varlen else ''}, checkpoint {args.checkpoint}, "
          f"autocast {args.autocast}", flush=True)
    data = torch.Generator().manual_seed(args.seed)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        length = draw.randint(max(2, args.seq // 4), args.seq) if args.varlen else args.seq
        tokens = torch.randint(args.vocab, (args.batch, length + 1), generator=data).to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.autocast):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.log_every and step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    print(f"done, {args.steps} steps in {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
