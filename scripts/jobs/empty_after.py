"""A recorded job's peak reserved replayed under a setting, from its start, with one empty_cache() added at the end
of a given step: what an in-process confirmation that emptied the cache before its first block did to the memory
its process reported (results/h100-in-process-2026-12-06b).

    python3 scripts/jobs/empty_after.py TRACE --conf expandable_segments:True [--steps 20] [--after 1 --after 2]

Per `--after K` (and once with none): the peak reserved over the first `--steps` steps (the trace's step ends).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alloctune.settings.conf import AllocConf  # noqa: E402
from alloctune.sim.allocator import Allocator  # noqa: E402
from alloctune.sim.trace import load_trace  # noqa: E402

GiB = 2**30


def peak(trace, conf: str, steps: int, after: int | None) -> float:
    """Peak reserved in GiB over the first `steps` steps, with empty_cache() at the end of step `after` (1-based)."""
    ends = trace.meta["step_ends"]
    alloc = Allocator(AllocConf.parse(conf), trace.meta["device_total_bytes"],
                      overhead_bytes=trace.meta.get("overhead_bytes", 0))
    empty_at = ends[after - 1] if after else None
    live = {}
    for i in range(ends[steps - 1]):
        if i == empty_at:
            alloc.empty_cache()
        kind, addr = trace.kinds[i], trace.addrs[i]
        if kind == 0:
            live[addr] = alloc.malloc_block(int(trace.sizes[i]), trace.streams[i])
        elif kind == 1 and (block := live.pop(addr, None)) is not None:
            alloc.free_block(block)
    return alloc.reserved_peak / GiB


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--conf", action="append", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--after", type=int, action="append", default=[])
    args = p.parse_args(argv)
    trace = load_trace(args.trace)
    for conf in args.conf:
        row = [f"from its start {peak(trace, conf, args.steps, None):.2f} GiB"]
        row += [f"empty_cache after step {k}: {peak(trace, conf, args.steps, k):.2f} GiB" for k in args.after]
        print(f"{conf}: " + "; ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
