"""How fast is replay? Events per second per setting on each simulator core, the default grid's wall time, and
`replay --min-memory` over the default grid.

    python benchmarks/sim_speed.py [TRACE ...] [--events 100000] [--jobs 2] [--rounds 7] [--no-python] [--min-memory]

Without TRACE it builds a deterministic transformer-like trace: variable-length batches through a 12-layer
model (weights and optimizer state made once; per step, activations saved in the forward pass and freed in
reverse during backward, short-lived temporaries, gradients), about 100,000 events. Events per second are
per core: trace events over the CPU time of the process that replays, so a busy machine slows the figures less than
wall time would. The compiled core replays each setting once untimed (warm-up), then --rounds times: the best and
the median round are printed, so that a figure depressed by a neighbour on a shared machine shows as a gap between
the two. The grid and --min-memory figures are wall time over --jobs processes. Not a test: it prints.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from alloctune.settings.conf import AllocConf  # noqa: E402
from alloctune.settings.grid import DEFAULT_GRID, apply_rules  # noqa: E402
from alloctune.sim.limits import DEFAULT_DEVICE_MEMORY  # noqa: E402
from alloctune.sim.replay import min_memory_many, replay  # noqa: E402
from alloctune.sim.simulate import core_notice, pack, simulate  # noqa: E402
from alloctune.sim.trace import ALLOC, FREE, Trace, load_trace  # noqa: E402


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
    for w in weights:   # Adam moments: made once, live to the end
        b.alloc(b.sizes[w] * 2 * fp32 // bf16)
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


def events_per_second(trace, conf: AllocConf, core: str, rounds: int, warmup: int) -> tuple[float, float, int]:
    """Events per CPU second of the best and of the median of `rounds` replays (after `warmup` untimed ones), and
    the peak reserved (to show both cores agree)."""
    seconds, peak = [], 0
    for i in range(warmup + rounds):
        start = time.process_time()
        peak = simulate(trace, conf, DEFAULT_DEVICE_MEMORY, core=core).peak_reserved_bytes  # type: ignore[arg-type]
        if i >= warmup:
            seconds.append(max(time.process_time() - start, 1e-9))
    return len(trace) / min(seconds), len(trace) / statistics.median(seconds), peak


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = "load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}, {load}"


def bench(name: str, trace, args) -> None:
    confs = [AllocConf.parse(c) for c in DEFAULT_GRID]
    cores = ["compiled"] + ([] if args.no_python else ["python"])
    print(f"trace: {name}: {len(trace):,} events, {trace.num_allocs:,} allocations")
    ops = pack(trace)
    print(f"  {'':49s} {'compiled ev/s, ' + str(args.rounds) + ' rounds':>25s}")
    header = f"  {'setting':49s} {'best':>12s} {'median':>12s}"
    print(header + ("" if args.no_python else f" {'Python ev/s':>11s} {'ratio':>6s}"))
    for conf in confs:
        if conf.is_async:
            continue
        rates = {core: events_per_second(ops, conf, core, args.rounds, 1) if core == "compiled"
                 else events_per_second(trace, conf, core, 1, 0) for core in cores}  # the Python core: once, it is slow
        assert len({peak for _, _, peak in rates.values()}) == 1, "the cores disagree"
        line = f"  {conf.label:49s} {rates['compiled'][0]:12,.0f} {rates['compiled'][1]:12,.0f}"
        if not args.no_python:
            line += f" {rates['python'][0]:11,.0f} {rates['compiled'][0] / rates['python'][0]:5.1f}x"
        print(line)
    start = time.perf_counter()
    replay(trace, confs, DEFAULT_DEVICE_MEMORY, jobs=args.jobs)
    seconds = time.perf_counter() - start
    print(f"  default grid ({len(confs)} settings) over {args.jobs} processes: {seconds:.2f} s wall")
    if args.min_memory:
        simulated, _ = apply_rules(confs, trace.meta.get("torch_version"), has_budget=False)
        start = time.perf_counter()
        min_memory_many(trace, simulated, jobs=args.jobs)
        print(f"  --min-memory over the default grid ({len(simulated)} settings) over {args.jobs} processes: "
              f"{time.perf_counter() - start:.2f} s wall")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="*", metavar="TRACE", help="trace files to time instead of the synthetic one")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7,
                        help="timed replays per setting on the compiled core (after one untimed); best and median")
    parser.add_argument("--no-python", action="store_true", help="time only the compiled core")
    parser.add_argument("--min-memory", action="store_true", help="also time replay --min-memory over the grid")
    args = parser.parse_args()

    print(f"machine: {machine()}")
    if core_notice() is not None:   # the compiled core is not built
        print(f"notice: {core_notice()}")
        return 1
    if not args.traces:
        bench(transformer_trace(args.events).meta["synthetic"], transformer_trace(args.events), args)
    for path in args.traces:
        bench(path, load_trace(path), args)
    print(f"machine at the end: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
