"""How fast is `search`? Wall time of a whole search of one trace, split into the time spent judging settings (the
target torch's parse, child start included) and the rest (replays, bookkeeping).

    python benchmarks/search_speed.py [TRACE] [--max-settings 400] [--jobs 2] [--rounds 3] [--python PATH]
                                      [--mode judge|per-batch|both]

TRACE defaults to the shipped transformer-varlen H200 trace. `judge` is what `alloctune search` does: one
`SettingsJudge` child of --python for the whole search. `per-batch` starts a child per batch
(`check_settings_detail`, as callers did before the judge). Each mode runs --rounds times, alternating, so that a
neighbour's load on a shared machine falls on both alike; the median and the range of each figure are printed, with
the load average before and after. With both modes it also checks that they replayed and refused the same
settings. Not a test: it prints figures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from alloctune.sim.limits import DEFAULT_DEVICE_MEMORY  # noqa: E402
from alloctune.sim.search import search  # noqa: E402
from alloctune.sim.trace import load_trace  # noqa: E402
from alloctune.trial.probe import check_settings_detail  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARLEN = os.path.join(ROOT, "workloads", "traces", "transformer-varlen-h200.xz")


def one_search(trace, mode: str, args) -> tuple[dict, object]:
    """Figures of one search: wall seconds, seconds judging, judge calls, settings judged; and its result."""
    calls: list[tuple[int, float]] = []

    def timed(validate):
        def judged(confs):
            start = time.perf_counter()
            check = validate(confs)
            calls.append((len(confs), time.perf_counter() - start))
            return check
        return judged

    start = time.perf_counter()
    if mode == "judge":
        from alloctune.trial.probe import SettingsJudge   # imported here: the per-batch mode runs on older trees

        opened = time.perf_counter()
        with SettingsJudge(args.python) as judge:
            calls.append((0, time.perf_counter() - opened))   # starting the child counts as judging
            result = search(trace, validate=timed(judge), device_memory=DEFAULT_DEVICE_MEMORY,
                            max_settings=args.max_settings, jobs=args.jobs)
    else:
        result = search(trace, validate=timed(partial(check_settings_detail, args.python)),
                        device_memory=DEFAULT_DEVICE_MEMORY, max_settings=args.max_settings, jobs=args.jobs)
    wall = time.perf_counter() - start
    judging = sum(seconds for _, seconds in calls)
    return {"wall s": wall, "judging s": judging, "rest s": wall - judging, "judge calls": len(calls),
            "settings judged": sum(n for n, _ in calls)}, result


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else "load unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?", default=VARLEN, metavar="TRACE")
    parser.add_argument("--max-settings", type=int, default=400)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose torch judges (default: this)")
    parser.add_argument("--mode", choices=("judge", "per-batch", "both"), default="both")
    args = parser.parse_args()

    modes = ["judge", "per-batch"] if args.mode == "both" else [args.mode]
    trace = load_trace(args.trace)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {load()}")
    print(f"trace: {args.trace}: {len(trace):,} events; --max-settings {args.max_settings}, --jobs {args.jobs}")
    figures: dict[str, list[dict]] = {mode: [] for mode in modes}
    results: dict[str, object] = {}
    for _ in range(args.rounds):
        for mode in modes:
            numbers, results[mode] = one_search(trace, mode, args)
            figures[mode].append(numbers)
    for mode in modes:
        replayed = len(results[mode].candidates)  # type: ignore[attr-defined]
        print(f"{mode}: {args.rounds} rounds, {replayed} settings replayed")
        for name in figures[mode][0]:
            values = [f[name] for f in figures[mode]]
            print(f"  {name:16s} median {statistics.median(values):8.2f}   range {min(values):.2f} - {max(values):.2f}")
    if len(modes) == 2:
        a, b = (results[m] for m in modes)
        same = ([c.conf for c in a.candidates] == [c.conf for c in b.candidates]  # type: ignore[attr-defined]
                and a.rejected == b.rejected)  # type: ignore[attr-defined]
        print(f"both modes replayed and refused the same settings: {'yes' if same else 'NO'}")
    print(f"machine at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
