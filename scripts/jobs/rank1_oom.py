"""Rank 1 of two runs out of memory; `alloctune.dump_on_oom` leaves its snapshot (issue 21, on one GPU).

`torchrun --nproc-per-node 2 scripts/jobs/rank1_oom.py FOLDER`: both ranks on cuda:0 (gloo between them), each
held to a fifth of the card by `set_per_process_memory_fraction`, as a job sharing a GPU would be. Both train a
few steps of an MLP on drawn batch sizes; then rank 1 keeps its activations of several steps alive (a leak, as
a forgotten `loss` in a list would) until a step no longer fits. Rank 0 finishes; rank 1 exits with the OOM.
"""
import os
import sys

import torch
import torch.distributed as dist

import alloctune

folder = sys.argv[1]
rank = int(os.environ["RANK"])
alloctune.dump_on_oom(folder)
torch.cuda.set_device(0)
torch.cuda.set_per_process_memory_fraction(0.2, 0)
dist.init_process_group("gloo")
torch.manual_seed(rank)
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
opt = torch.optim.Adam(model.parameters())
kept = []
for step in range(400):
    x = torch.randn(int(torch.randint(512, 8192, ()).item()), 4096, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if rank == 1 and step >= 5:
        kept.append(model[0](x))   # the leak: rank 1 alone keeps a step's output alive
    if step % 20 == 0:
        print(f"rank {rank} step {step}: allocated {torch.cuda.memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.memory_reserved() / 2**30:.2f} GiB", flush=True)
dist.destroy_process_group()
