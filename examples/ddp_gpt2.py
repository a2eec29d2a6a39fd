"""Data-parallel GPT-2 training with torch.distributed (DDP), one process per GPU, each rank drawing its own
batch and sequence length from a seeded RNG (so the ranks' memory peaks differ). Synthetic tokens, AdamW, bf16
autocast; a model built from a config (no download).

    torchrun --nproc-per-node 2 examples/ddp_gpt2.py [--steps 30] [--backend nccl]
    # two ranks on one GPU: --backend gloo
"""
from __future__ import annotations

import argparse
import os
import random

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import GPT2Config, GPT2LMHeadModel


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, nargs=2, default=[4, 16], metavar=("LOW", "HIGH"))
    p.add_argument("--seq-len", type=int, nargs=2, default=[128, 1024], metavar=("LOW", "HIGH"))
    p.add_argument("--backend", default="nccl", help="nccl (one GPU per rank) or gloo (ranks may share a GPU)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    torch.manual_seed(args.seed)   # the same initial weights on every rank
    config = GPT2Config(n_layer=args.layers, n_embd=args.d_model, n_head=args.heads, vocab_size=args.vocab,
                        n_positions=args.seq_len[1], bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = DistributedDataParallel(GPT2LMHeadModel(config).to(device), device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    rng, data = random.Random(args.seed + rank), torch.Generator().manual_seed(args.seed + rank)
    for i in range(args.steps):
        batch, seq = rng.randint(*args.batch), rng.randint(*args.seq_len)
        ids = torch.randint(args.vocab, (batch, seq), generator=data).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0 and (i + 1) % 10 == 0:
            print(f"step {i + 1}/{args.steps} loss {loss.item():.3f}", flush=True)
    print(f"rank {rank}: peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
          f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
