"""Where a replay's cudaMalloc and cudaFree calls fall in a recorded job's steady steps: per steady step, the
cudaFrees made by its empty_cache() calls (after the synchronisation that drains the queue) and by anything else
(a request, a free), and the cudaMallocs. What the speed model's misses on `mid` are read against
(results/h100-speed-rebuilt-2026-12-06b/NOTE.md).

    python3 scripts/jobs/free_placement.py TRACE [--conf SETTING ...]
"""
from __future__ import annotations

import argparse
from collections import Counter

from alloctune.settings.conf import AllocConf
from alloctune.sim.allocator import Allocator
from alloctune.sim.steady import steady_window
from alloctune.sim.trace import load_trace


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--conf", action="append", default=None, help="a setting (default: the default and max_split)")
    args = p.parse_args(argv)
    trace = load_trace(args.trace)
    window = steady_window(trace.meta)
    if window is None:
        raise SystemExit(f"{args.trace}: the trace marks no steady step")
    for conf in args.conf or ["", "max_split_size_mb:128"]:
        alloc = Allocator(AllocConf.parse(conf), int(trace.meta["device_total_bytes"]), torch_version="2.11")
        live: dict = {}
        frees: Counter = Counter()
        mallocs = 0
        for i, (kind, addr, size, stream) in enumerate(zip(trace.kinds, trace.addrs, trace.sizes, trace.streams)):
            before_free, before_malloc = alloc.cuda_frees, alloc.cuda_mallocs
            if kind == 0:
                live[addr] = alloc.malloc_block(size, stream)
            elif kind == 1 and (block := live.pop(addr, None)) is not None:
                alloc.free_block(block)
            elif kind == 2:
                alloc.empty_cache()
            if window.start <= i < window.end:
                frees["in empty_cache" if kind == 2 else "elsewhere"] += alloc.cuda_frees - before_free
                mallocs += alloc.cuda_mallocs - before_malloc
        per = window.steps
        print(f"{conf or 'default'}: per steady step ({per} steps), cudaFree in empty_cache "
              f"{frees['in empty_cache'] / per:.2f}, elsewhere {frees['elsewhere'] / per:.2f}; "
              f"cudaMalloc {mallocs / per:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
