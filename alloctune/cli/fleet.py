"""`alloctune fleet`: one setting for many jobs, from their traces: the settings ranked by how far each leaves
each job from its own best, and the one that loses least."""
from __future__ import annotations

import argparse
import dataclasses
import json

from .args import add_device, console, flagged, positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fleet", help="one setting for many jobs: rank settings by what each job gives up (no GPU needed)",
        description="Replay each job's TRACE under every setting (on its recording GPU's memory, or "
                    "--device-memory), and rank the settings by how much more memory than its own best each leaves "
                    "each job: fewest jobs it does not fit (an OOM) first, then fewest it fits only with alloc "
                    "retries, then the worst case, then the mean. The first is the setting that loses least across "
                    "them all; what each job gives up under it is shown.")
    p.add_argument("trace", metavar="TRACE", nargs="+",
                   help="one trace per job (snapshot pickle or compact trace; '-' for stdin, once)")
    p.add_argument("--conf", action="append", metavar="CONF",
                   help="a setting to rank ('default' for the default; repeatable; default: the default grid)")
    p.add_argument("--grid", metavar="FILE", help="a file listing the settings ('-' for stdin)")
    p.add_argument("--device-memory", metavar="SIZE",
                   help="replay every job on a card of this memory (default: each job's recording GPU's)")
    p.add_argument("--budget", metavar="SIZE",
                   help="a memory limit on every job's card, as a size (24GiB) or a share of it (0.5); settings of "
                        "garbage_collection_threshold, which acts only under one, are ranked with it")
    add_device(p)
    p.add_argument("--jobs", type=positive_int, metavar="N", help="replay worker processes (default: all cores)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: best (the setting that loses least, or null), settings in order, "
                        "each with its worst and mean loss and each job's peak and loss, left_out (the jobs no "
                        "setting runs), not_simulated, skipped, warnings (what each job's replay rests on, as "
                        "replay warns it, the job named) and jobs")
    p.set_defaults(func=run, flags=FLAGS)


FLAGS = {"traces": "TRACE", "confs": "--conf", "grid": "--grid", "device_memory": "--device-memory",
         "jobs": "--jobs", "device": "--device", "budget": "--budget"}


def run(args: argparse.Namespace) -> int:
    from ..api.fleet import FleetOptions, fleet
    from ..report.fleet import print_fleet
    from ..report.progress import Bars

    options = FleetOptions(args.trace, tuple(args.conf or ()), args.grid, args.device_memory, args.jobs,
                           device=args.device, budget=args.budget)
    with Bars(console(stderr=True)) as bars:
        result = fleet(options=options, progress=bars)
    result = dataclasses.replace(result, job_warnings=tuple(flagged(w, FLAGS) for w in result.job_warnings))
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print_fleet(console(), result)
    return 0
