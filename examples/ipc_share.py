"""A producer process that hands CUDA tensors to a consumer process through torch.multiprocessing queues, the way
a data-prep or rollout worker feeds a trainer: the tensors are shared (CUDA IPC), not copied. Synthetic data from
seeded generators, no download.

The producer (the main process) makes a batch of drawn size on the GPU each step and puts it on a queue; the
consumer (a spawned process) multiplies it by a weight of its own and sends back a number. The producer keeps
each batch alive until the consumer has answered for it, as CUDA IPC requires, with at most `--in-flight` batches
out at once.

    python3 examples/ipc_share.py [--steps 1000] [--width 4096] [--rows 256 4096] [--in-flight 4]

Without a GPU it runs the same way with CPU tensors (shared memory), e.g. as a smoke test:
--steps 4 --width 16 --rows 2 8
"""
from __future__ import annotations

import argparse
import queue
import random
import sys
import time

import torch
import torch.multiprocessing as mp


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000, help="batches handed over")
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--rows", type=int, nargs=2, default=[256, 4096], metavar=("LOW", "HIGH"))
    p.add_argument("--in-flight", type=int, default=4, help="batches out at once (kept alive by the producer)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=200, help="print the throughput every N steps (0: never)")
    return p.parse_args(argv)


def consume(batches, answers, width: int, device: str, seed: int) -> None:
    """The consumer: a weight of its own; for each batch received, one number back. None ends it."""
    torch.manual_seed(seed + 1)
    weight = torch.randn(width, width, device=device) / width**0.5
    while (item := batches.get()) is not None:
        step, x = item
        value = (x @ weight).relu().mean().item()
        del x   # release the producer's memory as soon as possible
        answers.put((step, value))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.steps < 1 or args.in_flight < 1:
        print("ipc_share: --steps and --in-flight must be at least 1", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ctx = mp.get_context("spawn")   # CUDA cannot be used in a forked child
    batches, answers = ctx.Queue(), ctx.Queue()
    worker = ctx.Process(target=consume, args=(batches, answers, args.width, device, args.seed))
    worker.start()
    rng, data = random.Random(args.seed), torch.Generator(device=device).manual_seed(args.seed)
    print(f"producer on {device}, consumer pid {worker.pid}", flush=True)
    out: dict[int, torch.Tensor] = {}   # batches the consumer has not answered for yet
    total, rows, start = 0.0, 0, time.perf_counter()

    def collect() -> None:
        """The oldest answer; a consumer that died (a setting its CUDA IPC fails under) ends the job."""
        nonlocal total
        while True:
            try:
                step, value = answers.get(timeout=1)
                break
            except queue.Empty:
                if not worker.is_alive():
                    raise SystemExit(f"ipc_share: the consumer died (exit code {worker.exitcode})") from None
        del out[step]
        total += value

    for step in range(args.steps):
        if len(out) >= args.in_flight:
            collect()
        n = rng.randint(*args.rows)
        out[step] = torch.randn(n, args.width, generator=data, device=device)
        batches.put((step, out[step]))
        rows += n
        if args.log_every and (step + 1) % args.log_every == 0:
            rate = rows / (time.perf_counter() - start)
            print(f"step {step + 1}/{args.steps} {rate:,.0f} rows/s", flush=True)
    while out:
        collect()
    batches.put(None)
    worker.join(timeout=300)
    print(f"mean answer {total / args.steps:.6f}", flush=True)
    if device == "cuda":
        print(f"producer peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
    return worker.exitcode or 0


if __name__ == "__main__":
    sys.exit(main())
