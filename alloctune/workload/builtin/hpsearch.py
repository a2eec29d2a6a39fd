"""A naive hyperparameter search: models of different sizes built, trained a few steps and dropped in one process.

Every `steps_per_model` steps the current model and its optimizer are dropped (`del`, as a search loop does) and a
model of a drawn width and depth is built with a drawn batch size. The cache keeps the old model's blocks, which
the next model's differently sized weights, optimizer states and activations may or may not fit.
"""
from __future__ import annotations

import random

import torch

from . import KINDS
from .common import PerStep, draw, generator
from .transformer import Decoder, train_step


def make(params: dict, device: torch.device, seed: int):
    p = KINDS["hpsearch"].resolve(params)
    rng, gen = random.Random(seed), generator(device, seed)
    # Model k serves steps k * steps_per_model ...; its size and batch depend on k alone.
    sizes = PerStep(lambda: (rng.choice(p["d_model"]), draw(rng, p["layers"]), draw(rng, p["batch"])))
    trial: dict = {}   # the current model's index, the model, its optimizer and batch size

    def build(k: int) -> None:
        trial.clear()   # drop the previous model and optimizer before building the next
        d_model, layers, batch = sizes[k]
        with device:
            trial["model"] = Decoder(layers, d_model, p["heads"], p["vocab"], p["seq_len"])
        trial.update(k=k, opt=torch.optim.AdamW(trial["model"].parameters(), lr=p["lr"]), batch=batch)

    def step(i: int) -> float:
        if trial.get("k") != i // p["steps_per_model"]:
            build(i // p["steps_per_model"])
        ids = torch.randint(p["vocab"], (trial["batch"], p["seq_len"] + 1), device=device, generator=gen)
        train_step(trial["model"], trial["opt"], ids, device)
        return float(trial["batch"] * p["seq_len"])

    return step
