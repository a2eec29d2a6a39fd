"""Variable-resolution image classification training with a ResNet (multi-scale training).

Every step draws a batch size and an image side (multiple of 32), so every activation, its gradient and the
convolution workspaces change size from step to step while the weights and optimizer state stay put.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import nn

from . import KINDS
from .common import PerStep, autocast, draw, generator


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class Trunk(nn.Module):
    """ResNet stem and stages (no head): stride 32, `width * 2**(len(blocks)-1)` output channels."""

    def __init__(self, blocks: list[int], width: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for stage, count in enumerate(blocks):
            cout = width * 2 ** stage
            for j in range(count):
                layers.append(BasicBlock(cin, cout, 2 if stage and j == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*layers)
        self.channels = cin

    def forward(self, x):
        return self.stages(self.stem(x))


def make(params: dict, device: torch.device, seed: int):
    p = KINDS["cnn"].resolve(params)
    rng, gen = random.Random(seed), generator(device, seed)
    with device:
        trunk = Trunk(p["blocks"], p["width"])
        model = nn.Sequential(trunk, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(trunk.channels, p["classes"]))
    opt = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=0.9)
    shapes = PerStep(lambda: (draw(rng, p["batch"]), draw(rng, p["resolution"], 32)))

    def step(i: int) -> float:
        batch, side = shapes[i]
        images = torch.randn(batch, 3, side, side, device=device, generator=gen)
        labels = torch.randint(p["classes"], (batch,), device=device, generator=gen)
        with autocast(device):
            logits = model(images)
        F.cross_entropy(logits.float(), labels).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(batch)

    return step
