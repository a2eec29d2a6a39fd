"""A hyperparameter search in one process, as a user writes it: --models causal transformer LMs one after another,
each of a drawn width, depth, learning rate and batch size, trained --steps-per-model steps with its own AdamW
(bf16 autocast on CUDA), its loss printed, then dropped when the next one is built (`model`, `opt` rebound).

    python3 examples/search_loop.py [--models 10] [--steps-per-model 8] [--widths 512 768 1024] [--layers 2 8] ...

Defaults: widths 512-1024, 2-8 layers, 4-8 sequences of 1024 tokens, 32k vocabulary: models of ~40-170M
parameters. No model outlives its trial, so each optimizer is dead before the next one steps: alloctune's hook
counts their steps as one source (80 at the defaults).
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from torch import nn


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=10, help="trials of the search, one model each")
    p.add_argument("--steps-per-model", type=int, default=8)
    p.add_argument("--widths", type=int, nargs="+", default=[512, 768, 1024], help="d_model drawn from these")
    p.add_argument("--layers", type=int, nargs=2, default=[2, 8], metavar=("MIN", "MAX"))
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, nargs=2, default=[4, 8], metavar=("MIN", "MAX"))
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class CausalLM(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(seq_len, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.body(self.tokens(x) + self.positions.weight[:x.shape[1]], mask=mask, is_causal=True))


def main(argv=None) -> None:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(args.seed)
    rng, data = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    for trial in range(args.models):
        width, layers = rng.choice(args.widths), rng.randint(*args.layers)
        lr, batch = 10 ** rng.uniform(-4.5, -3), rng.randint(*args.batch)
        model = CausalLM(args.vocab, width, layers, args.heads, args.seq_len).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        for _ in range(args.steps_per_model):
            x = torch.randint(args.vocab, (batch, args.seq_len + 1), generator=data).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                logits = model(x[:, :-1])
                loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        print(f"trial {trial + 1}: width {width}, {layers} layers, lr {lr:.2e}, batch {batch}: loss "
              f"{loss.item():.3f}", flush=True)
        del logits, loss, x
    print(f"done, {args.models} models in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
