"""`alloctune fleet`: one setting for many jobs, from their traces: the settings ranked by how far each leaves
each job from its own best, and the one that loses least."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import AlloctuneError
from .args import console, positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fleet", help="one setting for many jobs: rank settings by what each job gives up (no GPU needed)",
        description="Replay each job's TRACE under every setting (on its recording GPU's memory, or "
                    "--device-memory), and rank the settings by how much more memory than its own best each leaves "
                    "each job: fewest jobs that do not run (an OOM or an alloc retry) first, then the worst case, "
                    "then the mean. The first is the setting that loses least across them all; what each job gives up under it is shown.")
    p.add_argument("trace", metavar="TRACE", nargs="+",
                   help="one trace per job (snapshot pickle or compact trace; '-' for stdin, once)")
    p.add_argument("--conf", action="append", metavar="CONF",
                   help="a setting to rank ('default' for the default; repeatable; default: the default grid)")
    p.add_argument("--grid", metavar="FILE", help="a file listing the settings ('-' for stdin)")
    p.add_argument("--device-memory", metavar="SIZE",
                   help="replay every job on a card of this memory (default: each job's recording GPU's)")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="replay worker processes (default: all cores)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: best (the setting that loses least, or null), and settings in order, "
                        "each with its worst and mean loss and each job's peak and loss")
    p.set_defaults(func=run)


def job_names(paths: list[str]) -> list[str]:
    """A job's name: its trace's file name without its suffixes; the path where two names are alike."""
    names = [Path(p).name.split(".")[0] or p for p in paths]
    return [n if names.count(n) == 1 else p for n, p in zip(names, paths)]


def run(args: argparse.Namespace) -> int:
    from ..decide.fleet import rank_fleet
    from ..report.fleet import fleet_json, print_fleet
    from ..settings.grid import load_grid_file, ranked_settings
    from ..sim.points import fleet_peaks
    from ..sim.trace import load_trace
    from ..units import parse_size

    if (args.trace + [args.grid]).count("-") > 1:
        raise AlloctuneError("'-' (stdin) can be given once, among the traces and --grid")
    if len(set(args.trace)) != len(args.trace):
        raise AlloctuneError("each job's trace once: a job given twice would count twice")
    entries = (args.conf or []) + (load_grid_file(args.grid) if args.grid else [])
    device = parse_size(args.device_memory) if args.device_memory else None
    if device == 0:
        raise AlloctuneError("--device-memory must be above 0")
    traces = {name: load_trace(path) for name, path in zip(job_names(args.trace), args.trace)}
    # As replay ranks a grid: without a budget, what a memory fraction would act on is left out.
    versions = {t.meta.get("torch_version") for t in traces.values()}
    torch_version = versions.pop() if len(versions) == 1 else None
    confs, _ = ranked_settings(entries, torch_version, has_budget=False)
    peaks, not_simulated = fleet_peaks(traces, confs, device_memory=device, jobs=args.jobs)
    ranked = rank_fleet(peaks)
    if args.json:
        print(json.dumps(fleet_json(ranked, not_simulated), indent=2))
    else:
        print_fleet(console(), ranked, not_simulated)
    return 0
