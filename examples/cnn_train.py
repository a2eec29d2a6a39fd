"""Train a small convolutional network written in plain PyTorch on synthetic images: conv-batchnorm-ReLU stages
that halve the resolution and double the channels, global pooling, a linear classifier, AdamW; optionally bf16
autocast.

    python3 examples/cnn_train.py [--batch 64] [--size 128] [--steps 10] [--width 64] [--stages 4] [--autocast]

Defaults: 4 stages of two 3x3 convolutions from 64 to 512 channels (~9M parameters), 64 images of 128 x 128 a step.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="training steps")
    p.add_argument("--batch", type=int, default=64, help="images per step")
    p.add_argument("--size", type=int, default=128, help="image height and width")
    p.add_argument("--width", type=int, default=64, help="channels of the first stage")
    p.add_argument("--stages", type=int, default=4)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--autocast", action="store_true", help="bf16 autocast for forward and loss")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=5, help="print the loss every N steps (0: never)")
    return p.parse_args(argv)


def stage(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(inputs, outputs, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(outputs),
                         nn.ReLU(inplace=True), nn.Conv2d(outputs, outputs, 3, padding=1, bias=False),
                         nn.BatchNorm2d(outputs), nn.ReLU(inplace=True))


def model_for(args: argparse.Namespace) -> nn.Module:
    widths = [3] + [args.width * 2**i for i in range(args.stages)]
    return nn.Sequential(*(stage(a, b) for a, b in zip(widths, widths[1:])), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(widths[-1], args.classes))


def main(argv=None) -> None:
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    model = model_for(args).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    print(f"CNN: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}, batch {args.batch}, "
          f"size {args.size}, autocast {args.autocast}", flush=True)
    data = torch.Generator().manual_seed(args.seed)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        images = torch.randn(args.batch, 3, args.size, args.size, generator=data).to(device)
        labels = torch.randint(args.classes, (args.batch,), generator=data).to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.autocast):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.log_every and step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    print(f"done, {args.steps} steps in {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
