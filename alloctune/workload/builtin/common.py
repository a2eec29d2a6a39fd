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


class PerStep:
    """Draws that depend on the step index alone: `plan[i]` draws step i's values with `draw_one()` the first time
    any step up to i is asked for (in index order, from the factory's own rng) and keeps them. So the first pass
    over i = 0, 1, 2, ... draws exactly what drawing inside `step(i)` did, and a step run again (the trial child
    times a second pass over the warm pass's steps) gets the same shapes."""

    def __init__(self, draw_one) -> None:
        self._draw_one = draw_one
        self._drawn: list = []

    def __getitem__(self, i: int):
        while len(self._drawn) <= i:
            self._drawn.append(self._draw_one())
        return self._drawn[i]
