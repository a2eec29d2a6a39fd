"""The Mask R-CNN job of `maskrcnn_train.py` as an alloctune `entry:` workload (see maskrcnn_train.yaml).

The script knows nothing of alloctune; this wrapper builds the same model, optimizer and seeded batches, so a
trial of warmup_steps + steps makes the allocations of `python3 maskrcnn_train.py --steps N` in the same order.
"""
from __future__ import annotations

import random

import torch
from maskrcnn_train import parse_args, synthetic_batch
from torchvision.models.detection import maskrcnn_resnet50_fpn


def make(params: dict, device: torch.device, seed: int):
    args = parse_args([])
    unknown = set(params) - set(vars(args))
    if unknown:
        raise ValueError(f"unknown parameters {sorted(unknown)}; expected some of: {', '.join(vars(args))}")
    vars(args).update(params, seed=seed, log_every=0)
    model = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=args.classes).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    rng, gen = random.Random(args.seed), torch.Generator().manual_seed(args.seed)

    def step(i: int) -> float:
        images, targets = synthetic_batch(rng, gen, args, device)
        loss = sum(model(images, targets).values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(len(images))

    return step
