"""Train a GPT-2 language model on batches of variable shape (synthetic tokens), the way a plain training script
does it: transformers' GPT2LMHeadModel built from a config (no download), AdamW, bf16 autocast on CUDA.

Every step draws a batch size and a sequence length from a seeded RNG, so activations, attention and the fp32
logits of the loss change size every step while weights and optimizer state stay put.

    python3 examples/gpt2_varlen.py [--steps 500] [--layers 24] [--d-model 1024] ...

Defaults: a GPT-2 medium shape (24 layers, width 1024, ~355M parameters), 8-16 sequences of 128-1024 tokens.
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500, help="training steps")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, nargs=2, default=[8, 16], metavar=("LOW", "HIGH"))
    p.add_argument("--seq-len", type=int, nargs=2, default=[128, 1024], metavar=("LOW", "HIGH"))
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20, help="print the throughput every N steps (0: never)")
    return p.parse_args(argv)


class Trainer:
    """The model, its optimizer and the data stream; `step()` trains on one drawn batch and returns its tokens."""

    def __init__(self, args: argparse.Namespace, device: torch.device):
        self.args, self.device = args, device
        torch.manual_seed(args.seed)
        config = GPT2Config(n_layer=args.layers, n_embd=args.d_model, n_head=args.heads, vocab_size=args.vocab,
                            n_positions=args.seq_len[1], bos_token_id=args.vocab - 1,
                            eos_token_id=args.vocab - 1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        self.model = GPT2LMHeadModel(config).to(device)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr)
        self.rng = random.Random(args.seed)
        self.data = torch.Generator().manual_seed(args.seed)   # token contents, on the CPU like a data loader

    def step(self) -> int:
        batch = self.rng.randint(*self.args.batch)
        seq = self.rng.randint(*self.args.seq_len)
        ids = torch.randint(self.args.vocab, (batch, seq), generator=self.data).to(self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.last_loss = loss.item()
        return batch * seq


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    trainer = Trainer(args, device)
    params = sum(p.numel() for p in trainer.model.parameters())
    print(f"GPT-2: {params / 1e6:.0f}M parameters on {device}", flush=True)
    start, tokens = time.perf_counter(), 0
    for i in range(args.steps):
        tokens += trainer.step()
        if args.log_every and (i + 1) % args.log_every == 0:
            rate = tokens / (time.perf_counter() - start)
            print(f"step {i + 1}/{args.steps} loss {trainer.last_loss:.3f} {rate:,.0f} tokens/s", flush=True)
    if device.type == "cuda":
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
