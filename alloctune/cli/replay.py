"""`alloctune replay`: replay a recorded allocation trace under many settings, offline, and rank them."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Callable

from ..errors import AlloctuneError
from .args import add_replay_limits, console, positive_int, replay_limits, replay_warnings

if TYPE_CHECKING:
    from ..decide.maximum import TraceFigures


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "replay", help="replay a recorded allocation trace under many settings (no GPU needed)",
        description="Simulate PyTorch's caching allocator on TRACE (a torch.cuda.memory._dump_snapshot pickle, or "
                    "alloctune's compact trace) under each setting and rank them by peak reserved memory. "
                    "Pickles are read without running any code they hold.")
    p.add_argument("trace", metavar="TRACE", nargs="+",
                   help="snapshot pickle or compact alloctune trace ('-' for stdin); several (one per rank, as "
                        "`record -- CMD` writes for a multi-process command): each is replayed, then the maximum "
                        "per setting")
    p.add_argument("--conf", action="append", metavar="CONF",
                   help="a PYTORCH_CUDA_ALLOC_CONF setting to replay ('default' for the default); repeatable")
    p.add_argument("--grid", metavar="FILE",
                   help="YAML list or text file (one setting per line) of settings ('-' for stdin)")
    add_replay_limits(p, budget=", like sweep --budget")
    p.add_argument("--min-memory", action="store_true",
                   help="also find, per setting, the smallest device memory without OOM and without retries "
                        "(to 2 MiB; the whole device, --budget does not apply)")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: all usable cores)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: the trace, its warnings, results (one object per setting simulated) "
                        "and skipped (the settings without figures, with why; for several traces: traces, a list "
                        "of those, and maximum)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..decide.maximum import maximum
    from ..report.replay import print_maximum
    from ..settings.grid import load_grid_file

    if (args.trace + [args.grid]).count("-") > 1:
        raise AlloctuneError("'-' (stdin) can be given once, among the traces and --grid")
    grid = load_grid_file(args.grid) if args.grid else []   # read once, for every trace
    replayed, figures = zip(*(_replay_one(args, path, grid) for path in args.trace))
    if len(replayed) == 1:
        if args.json:
            print(json.dumps(replayed[0], indent=2))
        return 0
    highest = maximum(f for one in figures for f in one)
    if args.json:
        print(json.dumps({"traces": replayed, "maximum": [h.to_json() for h in highest]}, indent=2))
    else:
        print_maximum(console(), highest, [one["trace"] for one in replayed])
    return 0


def _replay_one(args: argparse.Namespace, path: str, grid: list) -> tuple[dict, list[TraceFigures]]:
    """Replay one trace; print its table (unless --json); return its JSON (the trace, warnings, results) and its
    figures."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..report.progress import Phases
    from ..report.replay import TraceReplay, print_trace
    from ..settings.grid import ranked_settings
    from ..sim.replay import min_memory_many, replay
    from ..sim.simulate import core_notice
    from ..sim.trace import load_trace

    with Phases(console(stderr=True)) as shown:   # a spinner only, gone when the trace is in
        shown.phase(f"loading {path}")
        trace = load_trace(path, device=args.device)
    device_memory, memory_from, budget_bytes, overhead = replay_limits(args, trace)
    # The sweep's rules apply here too (e.g. GC does nothing without a budget), so both rank the same grid.
    torch_version = trace.meta.get("torch_version")
    confs, skipped = ranked_settings((args.conf or []) + grid, torch_version, has_budget=budget_bytes is not None)

    err = console(stderr=True)
    if path == args.trace[0] and (note := core_notice()):   # once, not per trace
        err.print(f"[yellow]notice:[/] {note}")
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:   # a log: no bar
        def progress_of(description: str) -> Callable[[int, int], None]:
            task = bar.add_task(description, total=len(confs))
            return lambda done, total: bar.update(task, completed=done, total=total)

        outcomes = replay(trace, confs, device_memory, budget_bytes=budget_bytes, overhead_bytes=overhead,
                          jobs=args.jobs, progress=progress_of("replay"))
        capacities = (min_memory_many(trace, confs, overhead_bytes=overhead, jobs=args.jobs,
                                      progress=progress_of("smallest device (--min-memory)"))
                      if args.min_memory else [None] * len(confs))
    replayed = TraceReplay.ranked(path, trace, outcomes, list(capacities), skipped, device_memory, memory_from,
                                  budget_bytes, replay_warnings(trace, memory_from, torch_version,
                                                                  device_memory, budget_bytes))
    if not args.json:
        print_trace(console(), replayed)
    return replayed.to_json(), replayed.figures()
