"""Batched inference with `model.generate`: a randomly initialised Llama-shaped causal LM (transformers'
LlamaForCausalLM from a LlamaConfig, no download) completing batches of left-padded prompts of varying length with a
varying number of new tokens, greedy, under torch.inference_mode, bf16 weights on CUDA. No optimizer.

Every batch draws its number of prompts, its padded prompt length (each prompt's own length under the attention
mask) and max_new_tokens from a seeded RNG: the prefill and the KV cache, which grows by one token per decoding
step, change size from batch to batch.

    python3 examples/generate_varlen.py [--steps 16] [--batch 8 48] [--prompt-len 64 1536] [--new-tokens 32 160]

Defaults: 16 layers of width 1024 (~270M parameters with the 32k vocabulary), 8-48 prompts of up to 64-1536
tokens, 32-160 new tokens each (no end-of-sequence token: every batch runs its full max_new_tokens).
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=16, help="batches to generate")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, nargs=2, default=[8, 48], metavar=("LOW", "HIGH"))
    p.add_argument("--prompt-len", type=int, nargs=2, default=[64, 1536], metavar=("LOW", "HIGH"))
    p.add_argument("--new-tokens", type=int, nargs=2, default=[32, 160], metavar=("LOW", "HIGH"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=2, help="print the throughput every N batches (0: never)")
    return p.parse_args(argv)


def prompts(rng: random.Random, gen: torch.Generator, args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of token prompts left-padded to a drawn length, each prompt 1/2 to all of it long."""
    batch, width = rng.randint(*args.batch), rng.randint(*args.prompt_len)
    lengths = torch.randint(max(1, width // 2), width + 1, (batch, 1), generator=gen)
    mask = (torch.arange(width).flip(0) < lengths).long()   # left padding, as generation wants
    ids = torch.randint(1, args.vocab, (batch, width), generator=gen) * mask   # 0 = padding
    return ids, mask


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.d_model, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, intermediate_size=args.d_model * 11 // 4,
                         max_position_embeddings=args.prompt_len[1] + args.new_tokens[1],
                         pad_token_id=0, bos_token_id=None, eos_token_id=None)
    with torch.device(device):   # initialise the weights where they run
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16 if device.type == "cuda" else torch.float32).eval()
    print(f"Llama-shaped LM: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}",
          flush=True)
    rng, gen = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    start, generated = time.perf_counter(), 0
    with torch.inference_mode():
        for i in range(args.steps):
            ids, mask = prompts(rng, gen, args)
            new = rng.randint(*args.new_tokens)
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=new,
                                 do_sample=False, pad_token_id=0)
            generated += out.shape[0] * (out.shape[1] - ids.shape[1])
            if args.log_every and (i + 1) % args.log_every == 0:
                rate = generated / (time.perf_counter() - start)
                print(f"batch {i + 1}/{args.steps} {rate:,.0f} new tokens/s", flush=True)
    if device.type == "cuda":
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    print(f"done, {args.steps} batches, {generated} new tokens", flush=True)


if __name__ == "__main__":
    main()
