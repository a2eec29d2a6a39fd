"""Train a small causal transformer LM whose whole training step (forward, loss, backward, AdamW) replays a CUDA graph
per length bucket, the way a plain script does it: sequences padded up to the smallest of a few bucket lengths; a
bucket's first `--capture-after` steps run eagerly, then its step is captured with torch.cuda.graph (after three
warm-up steps on a side stream, as PyTorch's docs ask) and replayed from then on; every bucket's graph is captured
into one shared pool (torch.cuda.graph_pool_handle()); AdamW with capturable=True, so that its step runs inside the
graph. The eager steps of buckets not yet captured come between the replays of those that are. Synthetic tokens
from a seeded generator, no download.

    python3 examples/graph_buckets.py [--steps 60] [--buckets 128 256 384 512] [--capture-after 2] [--layers 4] ...

On the CPU every step runs eagerly (no capture), e.g. as a smoke test:
--steps 4 --layers 1 --d-model 32 --heads 2 --vocab 100 --buckets 8 16 --min-len 4 --batch 2
"""
from __future__ import annotations

import argparse
import random
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60, help="training steps")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--buckets", type=int, nargs="+", default=[128, 256, 384, 512],
                   help="sequence lengths a graph is captured for (a batch is padded up to the smallest that fits; "
                        "the largest is the longest length drawn)")
    p.add_argument("--capture-after", type=int, default=2, help="eager steps of a bucket before its capture")
    p.add_argument("--min-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20, help="print the loss every N steps (0: never)")
    return p.parse_args(argv)


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class CausalLM(nn.Module):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        d = args.d_model
        self.tokens, self.positions = nn.Embedding(args.vocab, d), nn.Embedding(max(args.buckets), d)
        self.blocks = nn.ModuleList(Block(d, args.heads) for _ in range(args.layers))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, args.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tokens(x) + self.positions.weight[:x.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


class Trainer:
    """The training step, eager or replayed from its bucket's graph."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, capture_after: int | None):
        self.model, self.opt, self.capture_after = model, opt, capture_after
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.seen: dict[int, int] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture_after is not None else None

    def step_eager(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-1)
        loss.backward()
        self.opt.step()
        return loss

    def step(self, x: torch.Tensor, y: torch.Tensor, bucket: int) -> torch.Tensor:
        self.seen[bucket] = self.seen.get(bucket, 0) + 1
        if self.capture_after is None or self.seen[bucket] <= self.capture_after:
            return self.step_eager(x, y).detach()
        if bucket not in self.graphs:
            self.graphs[bucket] = self._record(x, y)
        graph, static_x, static_y, static_loss = self.graphs[bucket]
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        return static_loss

    def _record(self, x: torch.Tensor, y: torch.Tensor) -> tuple:
        static_x, static_y = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.step_eager(static_x, static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            static_loss = self.step_eager(static_x, static_y)
        return graph, static_x, static_y, static_loss


def batch(args: argparse.Namespace, rng: random.Random, data: torch.Generator,
          device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Tokens and targets of a drawn length padded up to the smallest bucket that holds it (-1: no target there)."""
    length = rng.randint(args.min_len, max(args.buckets))
    bucket = min(b for b in args.buckets if b >= length)
    tokens = torch.randint(args.vocab, (args.batch, length + 1), generator=data)
    x = torch.zeros(args.batch, bucket, dtype=torch.long)
    y = torch.full((args.batch, bucket), -1, dtype=torch.long)
    x[:, :length], y[:, :length] = tokens[:, :-1], tokens[:, 1:]
    return x.to(device), y.to(device), bucket


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.steps < 1 or args.capture_after < 0 or args.min_len > max(args.buckets):
        print("graph_buckets: --steps must be at least 1, --capture-after at least 0 and --min-len at most the "
              "largest bucket", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(args.seed)
    model = CausalLM(args).to(device)
    # capturable: AdamW's step count stays on the GPU, which graph capture requires
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, capturable=cuda)
    trainer = Trainer(model, opt, args.capture_after if cuda else None)
    rng, data = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    print(f"causal LM: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}, buckets "
          f"{sorted(args.buckets)}, {args.steps} steps", flush=True)
    start = time.perf_counter()
    for i in range(args.steps):
        loss = trainer.step(*batch(args, rng, data, device))
        if args.log_every and (i + 1) % args.log_every == 0:
            print(f"step {i + 1}/{args.steps} loss {loss.item():.4f} "
                  f"{(i + 1) / (time.perf_counter() - start):.1f} steps/s", flush=True)
    print(f"done, {args.steps} steps, {len(trainer.graphs)} graphs", flush=True)
    if cuda:
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
