"""`alloctune replay`: replay a recorded allocation trace under many settings, offline, and rank them."""
from __future__ import annotations

import argparse
import dataclasses
import json

from .args import add_replay_limits, console, flagged, positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "replay", help="replay a recorded allocation trace under many settings (no GPU needed)",
        description="Replay TRACE (a torch.cuda.memory._dump_snapshot pickle, or alloctune's compact trace) through "
                    "a simulation of PyTorch's caching allocator under each setting and rank them by peak reserved "
                    "memory. Pickles are read without running any code they hold.")
    p.add_argument("trace", metavar="TRACE", nargs="+",
                   help="snapshot pickle or compact alloctune trace ('-' for stdin); several (one per rank, as "
                        "`record -- CMD` writes for a multi-process command): each is replayed, then the maximum "
                        "per setting")
    p.add_argument("--conf", action="append", metavar="CONF",
                   help="a PYTORCH_CUDA_ALLOC_CONF setting to replay ('default' for the default); repeatable")
    p.add_argument("--grid", metavar="FILE",
                   help="YAML list or text file (one setting per line) of settings ('-' for stdin)")
    add_replay_limits(p, budget=", like sweep --budget; default for a snapshot taken at an OOM, without "
                                "--device-memory: what it says the process could have (a memory fraction's limit)")
    p.add_argument("--min-memory", action="store_true",
                   help="also find, per setting, the smallest device memory without OOM and without retries "
                        "(to 2 MiB; the whole device, --budget does not apply)")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: all usable cores)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: the trace, its warnings, results (one object per setting replayed) "
                        "and skipped (the settings not simulated, with why and what the GPU measured, where the "
                        "trace holds it; for several traces: traces, a list of those, and maximum)")
    p.set_defaults(func=run, flags=FLAGS)


FLAGS = {"traces": "TRACE", "confs": "--conf", "grid": "--grid", "device_memory": "--device-memory",
         "budget": "--budget", "overhead": "--overhead", "device": "--device", "min_memory": "--min-memory",
         "jobs": "--jobs"}


def run(args: argparse.Namespace) -> int:
    from ..api.replay import ReplayOptions, replay
    from ..report.progress import Bars
    from ..report.replay import print_maximum, print_trace
    from ..sim.simulate import core_notice

    options = ReplayOptions(args.trace, tuple(args.conf or ()), args.grid, args.device_memory, args.budget,
                            args.overhead, args.device, args.min_memory, args.jobs)
    with Bars(console(stderr=True), lambda name: flagged(name, FLAGS), core_notice()) as bars:
        result = replay(options=options, progress=bars)
    replays = [flagged_replay(r, FLAGS) for r in result.replays]
    if args.json:
        print(json.dumps(dataclasses.replace(result, replays=tuple(replays)).to_json(), indent=2))
        return 0
    for one in replays:
        print_trace(console(), one)
    if result.maximum is not None:
        print_maximum(console(), list(result.maximum), [one.path for one in replays],
                      [one.provenance for one in replays])
    return 0


def flagged_replay(replayed, flags: dict[str, str]):
    """A trace's replay as a CLI user reads it: the options its words name (where the device memory came from,
    the warnings), as `flags`."""
    return dataclasses.replace(replayed, memory_from=flagged(replayed.memory_from, flags),
                               warnings=[flagged(w, flags) for w in replayed.warnings])
