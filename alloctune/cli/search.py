"""`alloctune search TRACE`: search the settings space of the target torch by replay; print the Pareto front."""
from __future__ import annotations

import argparse
import json

from ..settings.keys import names
from ..sim.limits import DEFAULT_MAX_SETTINGS
from .args import add_replay_limits, console, flagged, positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "search", help="search the whole allocator settings space by replaying a trace (no GPU needed)",
        description="Replay TRACE under hundreds of allocator settings that the target torch accepts (every key "
                    "and value it knows, one divisions value per size interval, valid combinations), refining "
                    "from the best, and print the Pareto front of peak reserved memory against release-and-retry "
                    "rounds and the number of keys set, with the reason each setting is on it.")
    p.add_argument("trace", metavar="TRACE", help="snapshot pickle or compact alloctune trace ('-' for stdin)")
    p.add_argument("--python", metavar="PATH",
                   help="the interpreter that will run the job: its torch parses every candidate and the "
                        "simulator follows its version (default: the torch that recorded TRACE, as replay)")
    p.add_argument("--max-settings", type=positive_int, default=DEFAULT_MAX_SETTINGS, metavar="N",
                   help="most settings to replay (default: %(default)s)")
    budget_keys = " and ".join(names(lambda key: key.needs_budget and key.search))
    add_replay_limits(p, budget=f"; adds {budget_keys} to the space")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: all usable cores)")
    p.add_argument("--json", action="store_true", help="print the search as one JSON object")
    p.set_defaults(func=run, flags=FLAGS)


FLAGS = {"trace": "TRACE", "python": "--python", "max_settings": "--max-settings",
         "device_memory": "--device-memory", "budget": "--budget", "overhead": "--overhead", "device": "--device",
         "jobs": "--jobs"}


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from ..api.search import SearchOptions, search
    from ..report.progress import Logged
    from ..report.search import print_front
    from ..units import format_bytes

    options = SearchOptions(args.trace, args.python, args.max_settings, args.device_memory, args.budget,
                            args.overhead, args.device, args.jobs)
    # The bar starts with the first replay: an interpreter that cannot be probed is refused in one line alone.
    err = console(stderr=True)
    bar = Progress(TextColumn("replays", style="bold"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}", markup=False), console=err, transient=True,
                   disable=not err.is_terminal)
    tasks: list[TaskID] = []
    log = Logged(err)

    def progress(done: int, total: int, best) -> None:
        text = f"best {format_bytes(best.peak_reserved)}: {best.conf}" if best and best.fits else ""
        if not err.is_terminal:
            log.count(done, total, text)
            return
        if not tasks:
            bar.start()
            tasks.append(bar.add_task("", total=total))
        # A setting is never cut: one too long for the bar is left out, its figure stays.
        text = text if len(text) <= 60 else text.partition(":")[0]
        bar.update(tasks[0], completed=done, total=total, description=text)

    try:
        result = search(options=options, progress=progress)
    finally:
        if tasks:   # rich prints a blank line on stopping a bar in a log, even one that never started
            bar.stop()
    log.close()
    warnings = [flagged(w, FLAGS) for w in result.warnings]
    if args.json:
        print(json.dumps(dict(result.to_json(), warnings=warnings), indent=2))
    else:
        print_front(console(), result.search, warnings, result.provenance)
    return 0
