"""The speed model judged under the condition the in-process blocks ran in (runs anywhere): a recording of a
speed_blocks.py job replayed under the default for its first steps, then switched to each setting at a step's end
(`Allocator.switch`, torch's run-time parse: the segments already made keep their kind), its driver calls counted
per step from there on, priced by the GPU's calibration (decide/speed.py's `predict`), against what the blocks
measured in one process (scripts/jobs/speed_model.py's table.json).

    python3 scripts/jobs/switch_replay.py RES [--job big --job mid --job small] [--json OUT.json]

RES holds calibration.json, table.json and per job JOB.xz (its recording) and JOB.json (its replay under each
setting from the start, for the default's own driver work). A job's steps end at its empty_cache calls; `small`
empties the cache every second step (`EVERY`).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alloctune.decide.speed import predict  # noqa: E402
from alloctune.results.calibration import read_calibration  # noqa: E402
from alloctune.results.records import DriverWork  # noqa: E402
from alloctune.settings.conf import AllocConf  # noqa: E402
from alloctune.sim.allocator import Allocator  # noqa: E402
from alloctune.sim.trace import load_trace  # noqa: E402
from speed_model import works  # noqa: E402   (beside this script)

SETTINGS = ("expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4")
EVERY = {"big": 1, "mid": 1, "small": 2}   # steps per empty_cache (speed_blocks.py's JOBS)
SWITCH_AT = 2    # empty_cache calls under the default before the switch (the process's warm-up)
SETTLE = 2       # empty_cache calls after it left out, as a block's first cycle is


def switched(path: Path, conf: str, every: int) -> DriverWork:
    """The driver work per step after a switch from the default to `conf`."""
    trace = load_trace(path)
    alloc = Allocator(AllocConf(), trace.meta["device_total_bytes"], overhead_bytes=trace.meta.get("overhead_bytes", 0))
    names = ("device_allocs", "cuda_mallocs"), ("device_alloc_bytes", "cuda_malloc_bytes"), \
        ("device_frees", "cuda_frees"), ("device_free_bytes", "cuda_free_bytes"), ("maps", "maps"), \
        ("map_bytes", "map_bytes"), ("unmaps", "unmaps"), ("unmap_bytes", "unmap_bytes")
    live, ends, start = {}, 0, None
    for kind, addr, size, stream in zip(trace.kinds, trace.addrs, trace.sizes, trace.streams):
        if kind == 0:
            live[addr] = alloc.malloc_block(int(size), stream)
        elif kind == 1 and (block := live.pop(addr, None)) is not None:
            alloc.free_block(block)
        elif kind == 2:
            alloc.empty_cache()
            ends += 1
            if ends == SWITCH_AT:
                alloc.switch(AllocConf.parse(conf))
            if ends == SWITCH_AT + SETTLE:
                start = {ours: getattr(alloc, theirs) for ours, theirs in names}
    assert start is not None, f"{path}: too few steps to count after the switch"
    steps = (ends - SWITCH_AT - SETTLE) * every
    return DriverWork(steps=steps, syncs=1 / every,
                      **{ours: (getattr(alloc, theirs) - start[ours]) / steps for ours, theirs in names})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("res", type=Path)
    p.add_argument("--job", action="append", default=None)
    p.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args(argv)
    cal = read_calibration(args.res / "calibration.json")
    measured = {(r["job"], r["setting"]): r for r in json.loads((args.res / "table.json").read_text())}
    out = []
    print("job    setting                       calls/step  measured (1 process)  predicted  off by")
    for job in args.job or ["big", "mid", "small"]:
        default = works(args.res / f"{job}.json")["default"]
        step = measured[(job, "default")]["parts"]["wall"]
        for conf in SETTINGS:
            work = switched(args.res / f"{job}.xz", conf, EVERY[job])
            predicted = predict(work, default, step, cal).predicted_slowdown
            m = measured[(job, conf)]
            assert predicted is not None
            out.append({"job": job, "setting": conf, "calls": work.calls, "measured": m["measured"],
                        "half_width": m["half_width"], "predicted": predicted, "work": asdict(work)})
            print(f"{job:6} {conf:28} {work.calls:10.2f}  {m['measured']:+8.1%} ±{m['half_width']:4.1%}      "
                  f"{predicted:+7.1%}  {(predicted - m['measured']) * 100:+5.1f}")
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
