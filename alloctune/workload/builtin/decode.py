"""LLM decode with a growing KV cache and mixed request sizes.

Each step serves one batch of requests of drawn size, prompt length and generation length: prefill, then greedy
decoding token by token. Every token, each layer's keys and values are concatenated into a new tensor one token
longer and the old one is freed (a naive HF-style cache), so the cache is reallocated at ever larger sizes that
the freed blocks never fit: the pattern behind reserved/allocated 1.35 (default) and 8.02 (max_split_size_mb:128)
seen on an H200.
"""
from __future__ import annotations

import random

import torch

from . import KINDS
from .common import PerStep, draw, generator
from .transformer import Decoder


def make(params: dict, device: torch.device, seed: int):
    p = KINDS["decode"].resolve(params)
    rng, gen = random.Random(seed), generator(device, seed)
    # Served models run in bf16 weights, not under autocast; CPU (tests) stays fp32.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with device:
        model = Decoder(p["layers"], p["d_model"], p["heads"], p["vocab"],
                        p["prompt_len"][1] + p["gen_len"][1]).to(dtype).eval()
    shapes = PerStep(lambda: (draw(rng, p["batch"]), draw(rng, p["prompt_len"]), draw(rng, p["gen_len"])))

    @torch.inference_mode()
    def step(i: int) -> float:
        batch, prompt, new = shapes[i]
        ids = torch.randint(p["vocab"], (batch, prompt), device=device, generator=gen)
        cache: list = []
        logits = model(ids, cache, last_only=True)
        for t in range(new - 1):
            logits = model(logits.argmax(-1), cache, start=prompt + t)
        return float(batch * new)

    return step
