"""How fast is replay? Events per second per setting, and the default grid's wall time over 2 processes.

    python benchmarks/sim_speed.py [TRACE] [--events 100000] [--jobs 2]

Without TRACE it builds a deterministic transformer-like trace: variable-length batches through a 12-layer
model (weights and optimizer state made once; per step, activations saved in the forward pass and freed in
reverse during backward, short-lived temporaries, gradients), about 100,000 events. Not a test: it prints.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from alloctune.conf import AllocConf  # noqa: E402
from alloctune.grid import DEFAULT_GRID  # noqa: E402
from alloctune.sim.simulate import simulate  # noqa: E402
from alloctune.sim.replay import DEFAULT_DEVICE_MEMORY, replay  # noqa: E402
from alloctune.sim.trace import ALLOC, FREE, Trace, load_trace  # noqa: E402
from alloctune.units import format_bytes  # noqa: E402


class _Builder:
    def __init__(self):
        self.trace = Trace([], [], [], [])
        self.next_id = 0
        self.sizes: dict[int, int] = {}

    def alloc(self, size: int) -> int:
        ident, self.next_id = self.next_id, self.next_id + 1
        self.sizes[ident] = size
        self._add(ALLOC, ident, size)
        return ident

    def free(self, ident: int) -> None:
        self._add(FREE, ident, self.sizes.pop(ident))

    def _add(self, kind, ident, size):
        t = self.trace
        for column, value in zip((t.kinds, t.addrs, t.sizes, t.streams), (kind, ident, size, 0)):
            column.append(value)


def transformer_trace(events: int, seed: int = 0, layers: int = 12, d: int = 1024, heads: int = 16) -> Trace:
    rng = random.Random(seed)
    b = _Builder()
    bf16, fp32 = 2, 4
    weights = [b.alloc(n * d * d * bf16) for _ in range(layers) for n in (3, 1, 4, 4)]
    optimizer = [b.alloc(b.sizes[w] * 2 * fp32 // bf16) for w in weights]  # Adam moments, made once
    grads: list[int] = []
    while len(b.trace) < events:
        batch, seq = rng.choice([2, 4, 8, 16]), rng.choice([64, 128, 256, 512, 1024, 2048])
        tokens = batch * seq
        saved: list[int] = []
        for _ in range(layers):
            for size in (tokens * d * bf16, 3 * tokens * d * bf16, batch * heads * seq * seq * bf16,
                         tokens * d * bf16, 4 * tokens * d * bf16, tokens * d * bf16):
                saved.append(b.alloc(size))
                tmp = b.alloc(rng.choice([tokens * d * bf16, tokens * fp32, 8192]))  # a short-lived temporary
                b.free(tmp)
        loss = b.alloc(tokens * fp32)
        for ident in grads:  # zero_grad(set_to_none=True) at the start of backward
            b.free(ident)
        grads = []
        for i, ident in enumerate(reversed(saved)):
            grad_in = b.alloc(b.sizes[ident])
            b.free(ident)
            b.free(grad_in)
            if i % 6 == 5:
                grads += [b.alloc(b.sizes[w]) for w in weights[4 * (layers - 1 - i // 6):4 * (layers - i // 6)]]
        b.free(loss)
    b.trace.meta["synthetic"] = f"transformer-like, seed {seed}, {layers} layers, d={d}"
    return b.trace


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?", help="a trace file to time instead of the synthetic one")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    trace = load_trace(args.trace) if args.trace else transformer_trace(args.events)
    confs = [AllocConf.parse(c) for c in DEFAULT_GRID]
    print(f"trace: {args.trace or trace.meta['synthetic']}: {len(trace):,} events, {trace.num_allocs:,} allocations")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    for conf in confs:
        if conf.is_async:
            print(f"  {conf.label:50s} not simulated (cudaMallocAsync)")
            continue
        start = time.perf_counter()
        result = simulate(trace, conf, DEFAULT_DEVICE_MEMORY)
        seconds = time.perf_counter() - start
        print(f"  {conf.label:50s} {len(trace) / seconds:12,.0f} events/s   "
              f"peak reserved {format_bytes(result.peak_reserved_bytes)}")
    start = time.perf_counter()
    replay(trace, confs, DEFAULT_DEVICE_MEMORY, jobs=args.jobs)
    print(f"default grid ({len(confs)} settings) over {args.jobs} processes: {time.perf_counter() - start:.2f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
