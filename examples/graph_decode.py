"""Generate with a small decoder-only transformer whose one-token decode step replays a CUDA graph, the way inference
servers do it: a static KV cache allocated once, one graph captured per batch size of a few buckets (1, 2, 4, 8 as
vLLM pads them), all captured into one shared pool (torch.cuda.graph_pool_handle()); each request batch is
prefilled eagerly (prompts of drawn lengths write the cache), then decoded by graph replays. Random weights,
random prompts from a seeded generator, no download.

    python3 examples/graph_decode.py [--requests 64] [--layers 8] [--d-model 1024] [--max-len 1024] ...

On the CPU the decode step runs eagerly (no capture), e.g. as a smoke test:
--requests 3 --layers 1 --d-model 32 --heads 2 --vocab 100 --max-len 32 --prompt 4 8 --new-tokens 4
"""
from __future__ import annotations

import argparse
import random
import sys
import time

import torch
from torch import nn

BUCKETS = (1, 2, 4, 8)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=64, help="prompts to answer, in batches of drawn size")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--max-len", type=int, default=1024, help="the KV cache's length: prompt + new tokens")
    p.add_argument("--prompt", type=int, nargs=2, default=[64, 512], metavar=("LOW", "HIGH"))
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class Decoder(nn.Module):
    """Pre-norm attention and MLP blocks over a static cache: `forward(tokens, start)` writes positions
    start..start+len of the cache and attends over everything before them."""

    def __init__(self, args: argparse.Namespace, batch: int, device: torch.device):
        super().__init__()
        d, self.heads = args.d_model, args.heads
        self.embed = nn.Embedding(args.vocab, d)
        self.pos = nn.Embedding(args.max_len, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(args.layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(args.layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                 for _ in range(args.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(2 * args.layers))
        self.head = nn.Linear(d, args.vocab)
        shape = (args.layers, 2, batch, args.heads, args.max_len, d // args.heads)
        self.register_buffer("cache", torch.zeros(shape, device=device, dtype=torch.float16), persistent=False)

    def forward(self, tokens: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        positions = start + torch.arange(n, device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        length = self.cache.shape[4]
        # a key at position p is visible to the query at position q when p <= q
        visible = torch.arange(length, device=tokens.device)[None, :] <= positions[:, None]
        for i, (qkv, out, mlp) in enumerate(zip(self.qkv, self.out, self.mlp)):
            q, k, v = qkv(self.norms[2 * i](x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            self.cache[i, 0, :b].index_copy_(2, positions, k.half())
            self.cache[i, 1, :b].index_copy_(2, positions, v.half())
            keys, values = self.cache[i, 0, :b].to(q.dtype), self.cache[i, 1, :b].to(q.dtype)
            attn = nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
            x = x + out(attn.transpose(1, 2).reshape(b, n, -1))
            x = x + mlp(self.norms[2 * i + 1](x))
        return self.head(x[:, -1])


class GraphedDecode:
    """One decode step per batch bucket, captured into one shared pool; `step(tokens, start)` copies the inputs in
    and replays the bucket's graph (or runs eagerly on the CPU)."""

    def __init__(self, model: Decoder, device: torch.device):
        self.model, self.graphs = model, {}
        self.tokens = torch.zeros(max(BUCKETS), 1, dtype=torch.long, device=device)
        self.start = torch.zeros((), dtype=torch.long, device=device)
        if device.type != "cuda":
            return
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):   # warm-up off the capture stream, as torch's docs ask
            for b in BUCKETS:
                model(self.tokens[:b], self.start)
        torch.cuda.current_stream().wait_stream(side)
        for b in reversed(BUCKETS):   # the largest first: the smaller ones reuse its pool's memory
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = model(self.tokens[:b], self.start)
            self.graphs[b] = (graph, logits)

    def step(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        b = next(size for size in BUCKETS if size >= tokens.shape[0])
        self.tokens[:tokens.shape[0]].copy_(tokens)
        self.start.fill_(start)
        if b not in self.graphs:
            return self.model(self.tokens[:b], self.start)[:tokens.shape[0]]
        graph, logits = self.graphs[b]
        graph.replay()
        return logits[:tokens.shape[0]]


@torch.no_grad()
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.prompt[1] + args.new_tokens > args.max_len:
        print("graph_decode: the longest prompt plus --new-tokens must fit in --max-len", file=sys.stderr)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    model = Decoder(args, max(BUCKETS), device).to(device).eval()
    decode = GraphedDecode(model, device)
    rng, data = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    print(f"decoder: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters on {device}, "
          f"{len(decode.graphs)} decode graphs", flush=True)
    done = tokens = 0
    begin = time.perf_counter()
    while done < args.requests:
        b = min(rng.choice(BUCKETS), args.requests - done)
        length = rng.randint(*args.prompt)
        prompts = torch.randint(args.vocab, (b, length), generator=data).to(device)
        next_token = model(prompts, torch.zeros((), dtype=torch.long, device=device)).argmax(-1, keepdim=True)
        for t in range(args.new_tokens):   # greedy decoding, one graph replay per token
            next_token = decode.step(next_token, length + t).argmax(-1, keepdim=True)
        done, tokens = done + b, tokens + b * args.new_tokens
    if device.type == "cuda":
        torch.cuda.synchronize()
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    print(f"done, {done} requests, {tokens / (time.perf_counter() - begin):,.0f} tokens/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
