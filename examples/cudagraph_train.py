"""Train an MLP with its training step replayed from a CUDA graph, the way a plain script does it: the whole step
(forward, loss, backward, Adam) captured once with torch.cuda.graph (`--mode graph`, PyTorch's "whole network
capture"), the model's forward and backward captured with torch.cuda.make_graphed_callables and the optimizer run
eagerly (`--mode graphed`, "partial network capture"), or the model compiled with
torch.compile(mode="reduce-overhead") (`--mode compile`, CUDA graphs through inductor's cudagraph trees; with
several `--batch` sizes, cycled step by step, each size records a graph of its own in the trees' one pool).
Synthetic data from a seeded generator, no download.

Graph replays reuse the memory captured in the graph's private pool; between them, every `--eval-every` steps,
an evaluation runs eagerly on a batch of drawn size, so the allocator also serves requests that change size.

    python3 examples/cudagraph_train.py [--mode graph|graphed|compile] [--steps 1500] [--batch 1024 [768 ...]] ...

`--mode graph` needs a CUDA GPU. `--mode graphed` runs the model eagerly on the CPU, and `--mode compile` too
(inductor leaves CUDA graphs out there), e.g. as a smoke test: --mode compile --steps 3 --width 32 --layers 2
--batch 8 6 --eval-batch 4 8
"""
from __future__ import annotations

import argparse
import random
import sys
import time

import torch
from torch import nn


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("graph", "graphed", "compile"), default="graph")
    p.add_argument("--steps", type=int, default=1500, help="training steps")
    p.add_argument("--width", type=int, default=2048, help="model width (the hidden layers are 4x wider)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, nargs="+", default=[1024],
                   help="training batch sizes, cycled (one for graph and graphed: a graph replays one shape)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-batch", type=int, nargs=2, default=[256, 4096], metavar=("LOW", "HIGH"))
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100, help="print the throughput every N steps (0: never)")
    return p.parse_args(argv)


def make_model(args: argparse.Namespace, device: torch.device) -> nn.Module:
    torch.manual_seed(args.seed)
    blocks = [nn.Sequential(nn.Linear(args.width, 4 * args.width), nn.GELU(), nn.Linear(4 * args.width, args.width))
              for _ in range(args.layers)]
    return nn.Sequential(*blocks, nn.LayerNorm(args.width), nn.Linear(args.width, 1)).to(device)


class GraphStep:
    """The whole training step captured once; `step(x, y)` copies the batch in and replays it."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor):
        self.model, self.opt = model, opt
        self.x, self.y = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):   # warm-up iterations off the capture stream, as torch's docs ask
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                self._train()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)   # backward in the capture allocates the gradients in the graph's pool
        with torch.cuda.graph(self.graph):
            self.loss = self._train()

    def _train(self) -> torch.Tensor:
        loss = nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.x.copy_(x)
        self.y.copy_(y)
        self.graph.replay()
        return self.loss


class GraphedStep:
    """The model's forward and backward as CUDA graphs (make_graphed_callables); the loss and Adam eager."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor):
        self.opt = opt
        # make_graphed_callables replaces a module's own forward: graphing a container of it keeps the model's
        # forward eager for the evaluation on batches of other sizes (the graph replays one shape)
        self.model = torch.cuda.make_graphed_callables(nn.Sequential(model), (x,)) if x.is_cuda else model

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()


class CompiledStep:
    """The model compiled with CUDA graphs (inductor's cudagraph trees capture forward and backward)."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer):
        self.compiled, self.opt = torch.compile(model, mode="reduce-overhead"), opt

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()   # the previous step's graph outputs may be overwritten
        loss = nn.functional.mse_loss(self.compiled(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()


def batch(n: int, width: int, data: torch.Generator, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, width, generator=data).to(device)
    return x, x.sum(dim=1, keepdim=True).tanh()   # a target the model can learn


@torch.no_grad()
def evaluate(model: nn.Module, n: int, width: int, data: torch.Generator, device: torch.device) -> float:
    x, y = batch(n, width, data, device)
    return nn.functional.mse_loss(model(x), y).item()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.steps < 1:
        print("cudagraph_train: --steps must be at least 1", file=sys.stderr)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.mode == "graph" and device.type != "cuda":
        print("cudagraph_train: --mode graph needs a CUDA GPU (--mode compile also runs on the CPU)",
              file=sys.stderr)
        return 2
    if args.mode != "compile" and len(args.batch) > 1:
        print(f"cudagraph_train: --mode {args.mode} replays one shape: give one --batch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = True
    model = make_model(args, device)
    # capturable: Adam's step stays on the GPU, which graph capture requires
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, capturable=args.mode == "graph")
    data, rng = torch.Generator().manual_seed(args.seed), random.Random(args.seed)
    params = sum(p.numel() for p in model.parameters())
    print(f"MLP: {params / 1e6:.0f}M parameters on {device}, --mode {args.mode}", flush=True)
    first = batch(args.batch[0], args.width, data, device)
    trainer = (GraphStep(model, opt, *first) if args.mode == "graph" else
               GraphedStep(model, opt, first[0]) if args.mode == "graphed" else CompiledStep(model, opt))
    start, samples = time.perf_counter(), 0
    for i in range(args.steps):
        n = args.batch[i % len(args.batch)]
        loss = trainer.step(*batch(n, args.width, data, device))
        samples += n
        if args.eval_every and (i + 1) % args.eval_every == 0:
            evaluate(model, rng.randint(*args.eval_batch), args.width, data, device)
        if args.log_every and (i + 1) % args.log_every == 0:
            rate = samples / (time.perf_counter() - start)
            print(f"step {i + 1}/{args.steps} loss {loss.item():.4f} {rate:,.0f} samples/s", flush=True)
    print(f"final loss {loss.item():.4f}", flush=True)
    if device.type == "cuda":
        print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
