"""Two-stage detection training with a variable number of objects per image.

Per step: a drawn batch of images of a drawn size goes through a ResNet trunk and a region-proposal head; per
image, its anchors are matched against 1..max_boxes ground-truth boxes (an IoU matrix anchors x boxes whose width
changes with every image), the positives get box-regression losses, and a second-stage head classifies and
refines the features at all positives of the batch (a row count that changes every step). So besides
resolution-dependent activations there are many data-dependent, variable-size tensors, as in Faster R-CNN or
DETR-style matching.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import nn

from . import KINDS
from .cnn import Trunk
from .common import PerStep, autocast, draw, generator

STRIDE = 32  # of the trunk's feature map


def anchors_for(side: int, scales: int, device) -> torch.Tensor:
    """(H*W*scales, 4) square anchors in xyxy, sides STRIDE * 2**k centred on every feature-map cell."""
    cells = side // STRIDE
    centres = (torch.arange(cells, device=device, dtype=torch.float32) + 0.5) * STRIDE
    cy, cx = torch.meshgrid(centres, centres, indexing="ij")
    half = STRIDE * 2.0 ** torch.arange(scales, device=device) / 2
    cx, cy, half = cx.reshape(-1, 1), cy.reshape(-1, 1), half.reshape(1, -1)
    return torch.stack([cx - half, cy - half, cx + half, cy + half], dim=-1).reshape(-1, 4)


def iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(len(a), len(b)) intersection over union of xyxy boxes."""
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda x: (x[:, 2:] - x[:, :2]).prod(-1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def encode(anchors: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Box-regression targets (dx, dy, dw, dh) of `boxes` relative to `anchors`."""
    wa, wb = anchors[:, 2:] - anchors[:, :2], boxes[:, 2:] - boxes[:, :2]
    ca, cb = anchors[:, :2] + wa / 2, boxes[:, :2] + wb / 2
    return torch.cat([(cb - ca) / wa, torch.log(wb / wa)], dim=-1)


def random_boxes(rng: random.Random, count: int, side: int) -> list[list[float]]:
    """`count` boxes inside a side x side image, sides between 16 px and half the image."""
    boxes = []
    for _ in range(count):
        w, h = rng.uniform(16, side / 2), rng.uniform(16, side / 2)
        x, y = rng.uniform(0, side - w), rng.uniform(0, side - h)
        boxes.append([x, y, x + w, y + h])
    return boxes


class Detector(nn.Module):
    def __init__(self, blocks: list[int], width: int, scales: int, classes: int, hidden: int):
        super().__init__()
        self.trunk = Trunk(blocks, width)
        c = self.trunk.channels
        self.rpn = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
        self.objectness = nn.Conv2d(c, scales, 1)
        self.deltas = nn.Conv2d(c, 4 * scales, 1)
        self.head = nn.Sequential(nn.Linear(c, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.cls = nn.Linear(hidden, classes + 1)   # + background
        self.box = nn.Linear(hidden, 4)

    def forward(self, images):
        """Per anchor (batch, H*W*scales): features (c), objectness logit, box deltas (4); anchor-major order."""
        f = self.trunk(images)
        r = self.rpn(f)
        b, c = f.shape[:2]
        scales = self.objectness.out_channels
        feats = f.permute(0, 2, 3, 1).reshape(b, -1, 1, c).expand(-1, -1, scales, -1).reshape(b, -1, c)
        obj = self.objectness(r).permute(0, 2, 3, 1).reshape(b, -1)
        deltas = self.deltas(r).permute(0, 2, 3, 1).reshape(b, -1, 4)
        return feats, obj, deltas


def make(params: dict, device: torch.device, seed: int):
    p = KINDS["detection"].resolve(params)
    rng, gen = random.Random(seed), generator(device, seed)
    with device:
        model = Detector(p["blocks"], p["width"], p["anchors"], p["classes"], p["hidden"])
    opt = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=0.9)

    def draw_step():
        # In the order the draws were always made: every image's boxes, then every image's labels.
        batch, side = draw(rng, p["batch"]), draw(rng, p["image_size"], 32)
        counts = [rng.randint(1, p["max_boxes"]) for _ in range(batch)]
        boxes = [random_boxes(rng, n, side) for n in counts]
        labels = [[rng.randrange(p["classes"]) for _ in range(n)] for n in counts]
        return batch, side, boxes, labels

    shapes = PerStep(draw_step)

    def step(i: int) -> float:
        batch, side, boxes, classes = shapes[i]
        gt = [torch.tensor(b, device=device) for b in boxes]
        labels = [torch.tensor(c, device=device) for c in classes]
        images = torch.randn(batch, 3, side, side, device=device, generator=gen)
        anchors = anchors_for(side, p["anchors"], device)
        with autocast(device):
            feats, obj, deltas = model(images)
        rpn_loss: torch.Tensor | float = 0.0
        roi_feats, roi_labels, roi_targets = [], [], []
        for j in range(batch):
            overlap = iou(anchors, gt[j])                  # anchors x boxes: its width varies per image
            best, match = overlap.max(dim=1)
            positive = best >= 0.5
            positive[overlap.argmax(dim=0)] = True         # every box gets at least its best anchor
            target = positive.float()
            ignore = (best >= 0.3) & ~positive
            rpn_loss = rpn_loss + F.binary_cross_entropy_with_logits(obj[j].float(), target, weight=(~ignore).float())
            idx = positive.nonzero().squeeze(1)            # a data-dependent number of rows
            reg = encode(anchors[idx], gt[j][match[idx]])
            rpn_loss = rpn_loss + F.smooth_l1_loss(deltas[j, idx].float(), reg)
            roi_feats.append(feats[j, idx])
            roi_labels.append(labels[j][match[idx]] + 1)  # 0 is background
            roi_targets.append(reg)
        with autocast(device):
            h = model.head(torch.cat(roi_feats))
            cls, box = model.cls(h), model.box(h)
        loss = rpn_loss + F.cross_entropy(cls.float(), torch.cat(roi_labels)) \
            + F.smooth_l1_loss(box.float(), torch.cat(roi_targets))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(batch)

    return step
