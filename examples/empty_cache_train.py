"""A plain-PyTorch training job that calls `torch.cuda.empty_cache()` after every step, a common folk remedy for
fragmentation: every step then gives its cached segments back to the driver and cudaMallocs them again, so the
allocator setting changes how much driver work a step does, and so its speed.

A causal transformer LM (`nn.TransformerEncoder`) on 8-16 sequences of 128-1024 tokens drawn per step, AdamW,
bf16 autocast on CUDA. `--no-empty-cache` runs the same job without the call (no driver work in the steady state).

    python3 examples/empty_cache_train.py [--steps 200] [--no-empty-cache] [--layers 6] [--d-model 1024]
    python3 examples/empty_cache_train.py --alternate 20    # blocks of 20 steps with and without the call, in turn

`--alternate N` measures what the call costs inside one process, where the noise between processes (a few percent)
does not enter: after the first block (warm-up), blocks of N steps alternate between calling it and not, each block
timed with the device synchronised at its ends, and the closing line gives both rates.
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from torch import nn


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--min-len", type=int, default=128)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--batch", type=int, nargs=2, default=(8, 16), help="sequences per step: drawn in [lo, hi]")
    p.add_argument("--no-empty-cache", dest="empty_cache", action="store_false",
                   help="do not call torch.cuda.empty_cache() after each step")
    p.add_argument("--alternate", type=int, default=0, metavar="N",
                   help="blocks of N steps with and without empty_cache in turn; print both rates (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=50, help="print the rate every N steps (0: never)")
    return p.parse_args(argv)


class CausalLM(nn.Module):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        d = args.d_model
        self.tokens, self.positions = nn.Embedding(args.vocab, d), nn.Embedding(args.max_len, d)
        layer = nn.TransformerEncoderLayer(d, args.heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.body = nn.TransformerEncoder(layer, args.layers)
        self.head = nn.Linear(d, args.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.body(self.tokens(x) + self.positions.weight[:x.shape[1]], mask=mask, is_causal=True))


def main(argv=None) -> None:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(args.seed)
    model = CausalLM(args).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng, data = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    print(f"causal LM: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}, "
          f"{args.steps} steps, empty_cache after each: "
          f"{f'every other block of {args.alternate}' if args.alternate else args.empty_cache and cuda}", flush=True)
    start = time.perf_counter()
    blocks: dict[bool, list[float]] = {True: [0.0, 0], False: [0.0, 0]}   # with the call: [seconds, steps]
    block_start = start
    for i in range(args.steps):
        batch, length = rng.randint(*args.batch), rng.randint(args.min_len, args.max_len)
        x = torch.randint(args.vocab, (batch, length + 1), generator=data).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x[:, :-1])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss, x
        calling = args.empty_cache if not args.alternate else (i // args.alternate) % 2 == 1
        if calling and cuda:
            torch.cuda.empty_cache()
        if args.alternate and (i + 1) % args.alternate == 0:
            if cuda:
                torch.cuda.synchronize()
            now = time.perf_counter()
            if i + 1 > args.alternate:   # the first block is the warm-up
                blocks[calling][0] += now - block_start
                blocks[calling][1] += args.alternate
            block_start = now
        if args.log_every and (i + 1) % args.log_every == 0:
            if cuda:
                torch.cuda.synchronize()
            print(f"step {i + 1}: {(i + 1) / (time.perf_counter() - start):.2f} steps/s", flush=True)
    if args.alternate:
        rates = {k: (n / sec if sec else 0.0) for k, (sec, n) in blocks.items()}
        print(f"alternating blocks of {args.alternate}: {rates[True]:.3f} steps/s with empty_cache, "
              f"{rates[False]:.3f} without ({blocks[True][1]:.0f} and {blocks[False][1]:.0f} steps)", flush=True)
    print(f"done, {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
