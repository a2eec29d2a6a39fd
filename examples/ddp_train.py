"""Data-parallel training of a causal transformer language model with torch.distributed (DDP), plain PyTorch (no
transformers): one process per GPU over NCCL, or CPU processes over gloo. Synthetic tokens, AdamW, bf16 autocast
on CUDA.

Every step each rank draws its own batch size and sequence length from a seeded RNG, so the ranks' activations
and peaks differ while the weights, the gradients DDP all-reduces and the optimizer state stay put.

    torchrun --nproc-per-node 2 examples/ddp_train.py [--steps 120] [--layers 16] [--d-model 1024] ...
    # more ranks than GPUs: --backend gloo. Without CUDA it runs on the CPU over gloo, e.g. tiny:
    torchrun --nproc-per-node 2 examples/ddp_train.py --steps 3 --layers 1 --d-model 64 --vocab 500

Defaults: 16 layers of width 1024 (~270M parameters with the 32k vocabulary), 8-16 sequences of 128-1024 tokens.
"""
from __future__ import annotations

import argparse
import os
import random
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=120, help="training steps")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, nargs=2, default=[8, 16], metavar=("LOW", "HIGH"))
    p.add_argument("--seq-len", type=int, nargs=2, default=[128, 1024], metavar=("LOW", "HIGH"))
    p.add_argument("--backend", default=None,
                   help="nccl (one GPU per rank) or gloo (ranks may share a GPU; the CPU); default: nccl with CUDA")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20, help="rank 0 prints the throughput every N steps (0: never)")
    return p.parse_args(argv)


class CausalLM(nn.Module):
    """Token and position embeddings, a pre-norm nn.TransformerEncoder under a causal mask, a vocabulary head."""

    def __init__(self, args: argparse.Namespace):
        super().__init__()
        d = args.d_model
        self.tokens = nn.Embedding(args.vocab, d)
        self.positions = nn.Embedding(args.seq_len[1], d)
        layer = nn.TransformerEncoderLayer(d, args.heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, args.layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = nn.Linear(d, args.vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=ids.device)
        x = self.tokens(ids) + self.positions(torch.arange(seq, device=ids.device))
        return self.head(self.blocks(x, mask=mask, is_causal=True))


def main(argv=None) -> None:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.manual_seed(args.seed)   # the same initial weights on every rank
    model = CausalLM(args).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    rng, data = random.Random(args.seed + rank), torch.Generator().manual_seed(args.seed + rank)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"causal LM: {params / 1e6:.1f}M parameters, {world} ranks on {device.type}", flush=True)
    start, tokens = time.perf_counter(), 0
    for i in range(args.steps):
        batch, seq = rng.randint(*args.batch), rng.randint(*args.seq_len)
        ids = torch.randint(args.vocab, (batch, seq + 1), generator=data).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = ddp(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += batch * seq
        if rank == 0 and args.log_every and (i + 1) % args.log_every == 0:
            rate = tokens / (time.perf_counter() - start)
            print(f"step {i + 1}/{args.steps} loss {loss.item():.3f} {rate:,.0f} tokens/s (rank 0)", flush=True)
    if cuda:
        print(f"rank {rank}: peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    print(f"rank {rank}: done, {args.steps} steps", flush=True)
    dist.barrier()   # both ranks done before either tears gloo down (one seen aborting in teardown otherwise)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
