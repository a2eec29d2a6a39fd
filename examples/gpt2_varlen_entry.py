"""The GPT-2 job of `gpt2_varlen.py` as an alloctune `entry:` workload (see gpt2_varlen.yaml).

The script itself knows nothing of alloctune; this wrapper builds the same Trainer, so a trial of the workload
makes the same allocations, in the same order, as `python3 gpt2_varlen.py --steps N` with N = warmup_steps +
steps: sweeping either way measures the same job.
"""
from __future__ import annotations

import torch
from gpt2_varlen import Trainer, parse_args


def make(params: dict, device: torch.device, seed: int):
    args = parse_args([])
    unknown = set(params) - set(vars(args))
    if unknown:
        raise ValueError(f"unknown parameters {sorted(unknown)}; expected some of: {', '.join(vars(args))}")
    vars(args).update(params, seed=seed, log_every=0)
    trainer = Trainer(args, device)
    return lambda i: float(trainer.step())
