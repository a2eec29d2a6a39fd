"""Train a randomly initialised transformers GPT-2 on fixed-shape batches of synthetic tokens, the way a plain
training loop over a Hugging Face model does it: the model built from a config (no download), its default attention
(`sdpa`), AdamW, fp32.

    python3 examples/gpt2_train.py [--batch 8] [--seq 1024] [--steps 10] [--layers 12] [--d-model 768] ...

Defaults: GPT-2 small (12 layers, width 768, vocabulary 50257, ~124M parameters), 8 sequences of 1024 tokens a step.
"""
from __future__ import annotations

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="training steps")
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=5, help="print the loss every N steps (0: never)")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    config = GPT2Config(n_layer=args.layers, n_embd=args.d_model, n_head=args.heads, vocab_size=args.vocab,
                        n_positions=args.seq, bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1)
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    print(f"GPT-2: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}, "
          f"batch {args.batch}, seq {args.seq}", flush=True)
    data = torch.Generator().manual_seed(args.seed)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        tokens = torch.randint(args.vocab, (args.batch, args.seq), generator=data).to(device)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.log_every and step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    print(f"done, {args.steps} steps in {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
