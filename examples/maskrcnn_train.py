"""Train torchvision's Mask R-CNN (ResNet-50 FPN, no pretrained weights) on synthetic images of variable size
with a variable number of objects each, SGD, the way a plain detection training loop does it.

Every step draws a batch size, and per image a size and a number of objects with random boxes and masks, from a
seeded RNG: the resized, padded batch, the anchor matching, the proposals and the mask targets change shape every
step.

    python3 examples/maskrcnn_train.py [--steps 120] [--batch 2 8] [--image-size 480 1024] [--max-objects 30]
"""
from __future__ import annotations

import argparse
import random
import time

import torch
from torchvision.models.detection import maskrcnn_resnet50_fpn


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=120, help="training steps")
    p.add_argument("--batch", type=int, nargs=2, default=[2, 8], metavar=("LOW", "HIGH"), help="images per step")
    p.add_argument("--image-size", type=int, nargs=2, default=[480, 1024], metavar=("LOW", "HIGH"),
                   help="height and width, each drawn per image")
    p.add_argument("--max-objects", type=int, default=30, help="objects per image are drawn from 1..N")
    p.add_argument("--classes", type=int, default=91)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10, help="print the throughput every N steps (0: never)")
    return p.parse_args(argv)


def synthetic_batch(rng: random.Random, gen: torch.Generator, args: argparse.Namespace, device: torch.device):
    """Images of drawn sizes, each with 1..max_objects boxes, labels and binary masks filling the boxes."""
    images, targets = [], []
    for _ in range(rng.randint(*args.batch)):
        h, w = rng.randint(*args.image_size), rng.randint(*args.image_size)
        n = rng.randint(1, args.max_objects)
        x0 = torch.randint(0, w - 32, (n,), generator=gen)
        y0 = torch.randint(0, h - 32, (n,), generator=gen)
        x1 = torch.minimum(x0 + 16 + torch.randint(0, w // 2, (n,), generator=gen), torch.tensor(w))
        y1 = torch.minimum(y0 + 16 + torch.randint(0, h // 2, (n,), generator=gen), torch.tensor(h))
        masks = torch.zeros(n, h, w, dtype=torch.uint8)
        for j in range(n):
            masks[j, y0[j]:y1[j], x0[j]:x1[j]] = 1
        images.append(torch.rand(3, h, w, generator=gen).to(device))
        targets.append({"boxes": torch.stack([x0, y0, x1, y1], 1).float().to(device),
                        "labels": torch.randint(1, args.classes, (n,), generator=gen).to(device),
                        "masks": masks.to(device)})
    return images, targets


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    model = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=args.classes).to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    rng, gen = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    start, images_done = time.perf_counter(), 0
    for i in range(args.steps):
        images, targets = synthetic_batch(rng, gen, args, device)
        losses = model(images, targets)
        loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        images_done += len(images)
        if args.log_every and (i + 1) % args.log_every == 0:
            rate = images_done / (time.perf_counter() - start)
            print(f"step {i + 1}/{args.steps} loss {loss.item():.3f} {rate:.1f} images/s", flush=True)
    if device.type == "cuda":
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
