"""Torch helpers the built-in kinds share (imported only inside trial children and tests)."""
from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device):
    """bf16 autocast on CUDA, as mixed-precision training runs; plain fp32 elsewhere (CPU tests)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def generator(device: torch.device, seed: int) -> torch.Generator:
    """The factory's own generator for synthetic tensor contents, so they do not depend on global RNG use."""
    return torch.Generator(device=device).manual_seed(seed)


def draw(rng, bounds: list[int], multiple: int = 1) -> int:
    """A value drawn uniformly from [low, high], on multiples of `multiple` (low rounded up, at least one)."""
    low = -(-bounds[0] // multiple)
    high = max(low, bounds[1] // multiple)
    return rng.randint(low, high) * multiple
