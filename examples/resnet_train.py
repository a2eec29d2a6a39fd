"""Train a torchvision ResNet-50 (no pretrained weights) on synthetic images, the way an image-classification script
does it: batches made on the host and moved to the GPU, cross-entropy, SGD with momentum and weight decay.

    python3 examples/resnet_train.py [--batch 64] [--size 224] [--steps 10] [--arch resnet50]

Defaults: ResNet-50 (25.6M parameters, 1000 classes), 64 images of 224 x 224 a step, fp32, cuDNN's default
algorithm choice (no benchmark mode).
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import torchvision


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="training steps")
    p.add_argument("--batch", type=int, default=64, help="images per step")
    p.add_argument("--size", type=int, default=224, help="image height and width")
    p.add_argument("--arch", default="resnet50", help="a torchvision.models classification model")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=5, help="print the loss every N steps (0: never)")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.arch)(weights=None, num_classes=args.classes).to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    print(f"{args.arch}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}, "
          f"batch {args.batch}, size {args.size}", flush=True)
    data = torch.Generator().manual_seed(args.seed)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        images = torch.randn(args.batch, 3, args.size, args.size, generator=data).to(device)
        labels = torch.randint(args.classes, (args.batch,), generator=data).to(device)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.log_every and step % args.log_every == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    print(f"done, {args.steps} steps in {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
