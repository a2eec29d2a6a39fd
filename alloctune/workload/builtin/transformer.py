"""Decoder-only transformer training with variable batch shapes (or packed to one fixed shape).

Unpacked, every step draws a batch size and a sequence length, so activations, attention, logits and the fp32
loss upcast change size every step: the case where the default allocator fragments (reserved/allocated 1.67 seen
on an H200). Packed, every step has the same shape: the static baseline.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import nn

from . import KINDS
from .common import PerStep, autocast, draw, generator


class Block(nn.Module):
    """Pre-norm attention + MLP block. With a KV cache it appends this step's keys and values by concatenation
    (a new, slightly larger tensor every token, as naive HF-style caches do)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, past=None):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        # Prefill and training are causal; a decode step's single query attends to the whole cache.
        att = F.scaled_dot_product_attention(q, k, v, is_causal=past is None and s > 1)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x)), (k, v)


class Decoder(nn.Module):
    """GPT-style decoder with tied input/output embeddings and learned positions."""

    def __init__(self, layers: int, d_model: int, heads: int, vocab: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, ids, cache: list | None = None, start: int = 0, last_only: bool = False):
        """Logits (of the last position only with `last_only`, as generation needs). `cache`, one (k, v) per layer,
        is filled by a prefill and then extended in place, layer by layer, as HF's DynamicCache is: each layer's
        old tensors are freed as soon as its new ones exist."""
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.embed(ids) + self.pos(positions)
        for i, block in enumerate(self.blocks):
            past = cache[i] if cache is not None and i < len(cache) else None
            x, kv = block(x, past)
            if cache is not None:
                cache[i:i + 1] = [kv]
        x = self.norm(x[:, -1:] if last_only else x)
        return F.linear(x, self.embed.weight)


def train_step(model, opt, ids, device) -> None:
    """One forward + backward + AdamW step on next-token prediction, with the fp32 loss upcast HF models do."""
    with autocast(device):
        logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def make(params: dict, device: torch.device, seed: int):
    p = KINDS["transformer"].resolve(params)
    rng, gen = random.Random(seed), generator(device, seed)
    with device:
        model = Decoder(p["layers"], p["d_model"], p["heads"], p["vocab"], p["seq_len"][1])
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"])
    shapes = PerStep(lambda: (p["batch"][1], p["seq_len"][1]) if p["packed"]
                     else (draw(rng, p["batch"]), draw(rng, p["seq_len"])))

    def step(i: int) -> float:
        batch, seq = shapes[i]
        # seq + 1 tokens: inputs and shifted targets are both seq long.
        ids = torch.randint(p["vocab"], (batch, seq + 1), device=device, generator=gen)
        train_step(model, opt, ids, device)
        return float(batch * seq)

    return step
