"""`alloctune search TRACE`: search the settings space of the target torch by replay; print the Pareto front."""
from __future__ import annotations

import argparse
import json
import sys

from .args import console, positive_int, replay_limits, replay_warnings


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "search", help="search the whole allocator settings space by replaying a trace (no GPU needed)",
        description="Replay TRACE under hundreds of allocator settings that the target torch accepts (every key "
                    "and value it knows, one divisions value per size interval, valid combinations), refining "
                    "from the best, and print the Pareto front of peak reserved memory against release-and-retry "
                    "rounds and the number of keys set, with the reason each setting is on it.")
    p.add_argument("trace", metavar="TRACE", help="snapshot pickle or compact alloctune trace ('-' for stdin)")
    p.add_argument("--python", default=sys.executable, metavar="PATH",
                   help="the interpreter whose torch the setting is for: it parses every candidate, and the "
                        "simulator follows its version (default: this one)")
    p.add_argument("--max-settings", type=positive_int, default=None, metavar="N",
                   help="most settings to replay (default: 400)")
    p.add_argument("--device-memory", metavar="SIZE",
                   help="device memory, e.g. 80GiB (default: the recording GPU's, else an H200's)")
    p.add_argument("--budget", metavar="SIZE",
                   help="memory limit as a size (24GiB) or a fraction of the device (0.5); adds "
                        "garbage_collection_threshold to the space")
    p.add_argument("--overhead", metavar="SIZE",
                   help="device memory held outside the allocator (default: what the trace recorded, else 1GiB)")
    p.add_argument("--device", type=int, help="which device's trace, when the snapshot has several")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: all usable cores)")
    p.add_argument("--json", action="store_true", help="print the search as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from ..sim.search import DEFAULT_MAX_SETTINGS, search
    from ..sim.trace import load_trace
    from ..trial.probe import SettingsJudge
    from ..units import format_bytes

    trace = load_trace(args.trace, device=args.device)
    device_memory, memory_from, budget_bytes, overhead = replay_limits(args, trace)

    # The bar starts with the first replay: an interpreter that cannot be probed is refused in one line alone.
    bar = Progress(TextColumn("[bold]replays"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=console(stderr=True), transient=True)
    tasks: list[TaskID] = []

    def progress(done: int, total: int, best) -> None:
        if not tasks:
            bar.start()
            tasks.append(bar.add_task("", total=total))
        text = f"best {format_bytes(best.peak_reserved)}: {best.conf or 'default'}" if best and best.fits else ""
        bar.update(tasks[0], completed=done, total=total, description=text[:60])

    try:
        with SettingsJudge(args.python) as validate:   # one child of --python judges every batch
            result = search(trace, validate=validate, trace_name=args.trace, device_memory=device_memory,
                            budget_bytes=budget_bytes, overhead_bytes=overhead,
                            max_settings=args.max_settings or DEFAULT_MAX_SETTINGS, jobs=args.jobs,
                            progress=progress)
    finally:
        if tasks:   # rich prints a blank line on stopping a bar in a log, even one that never started
            bar.stop()
    # The simulator follows --python's torch, not the recording's: only a version it does not know is worth a word.
    warnings = replay_warnings(trace, memory_from, result.torch_version)
    if args.json:
        print(json.dumps(dict(result.to_json(), warnings=warnings), indent=2))
    else:
        print_front(result, warnings)
    return 0


def print_front(result, warnings: list[str]) -> None:
    from ..report.tables import natural_width
    from ..units import format_bytes

    narrow = console()
    narrow.width = min(narrow.width, 100)
    narrow.print(f"[bold]{result.trace}[/]: {len(result.candidates)} settings replayed as torch "
                 f"{result.torch_version} in {result.seconds:.1f} s ({result.rounds} refinement round"
                 f"{'' if result.rounds == 1 else 's'}); "
                 f"{result.equivalent} more behave like one of them on this trace; {len(result.rejected)} "
                 f"refused by torch or the rules; device memory {format_bytes(result.device_memory)}"
                 + (f", budget {format_bytes(result.budget_bytes)}" if result.budget_bytes else ""))
    for warning in warnings:
        narrow.print(f"[yellow]warning:[/] {warning}")
    # A setting is what the user copies: it never breaks. When the longest does not fit beside the figures,
    # the settings go whole on the numbered lines below the table instead.
    table = _front_table(result, with_setting=True)
    whole = natural_width(table) <= narrow.width
    narrow.print(table if whole else _front_table(result, with_setting=False))
    for n, member in enumerate(result.front, 1):
        if whole:
            narrow.print(f"  {n}. {member.reason}")
        else:   # a setting longer than the line runs past it rather than break
            narrow.print(f"  {n}. {member.candidate.conf or 'default'}", soft_wrap=True)
            narrow.print(f"     {member.reason}")
    if not result.front:
        narrow.print("[red]No setting replayed without running out of memory.[/]")
    for note in result.notes:
        narrow.print(f"[dim]note: {note}[/]")


def _front_table(result, with_setting: bool):
    from rich import box
    from rich.table import Table

    from ..report.tables import add_setting_column
    from ..units import format_bytes

    default = result.default
    table = Table(title="Pareto front: peak reserved, retries, keys", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True)
    table.add_column("#", justify="right")
    if with_setting:
        add_setting_column(table, (m.candidate.conf or "default" for m in result.front))
    for name in ("peak\nreserved", "res/\nalloc", "retries", "keys", "vs\ndefault"):
        table.add_column(name, justify="right", no_wrap=True)
    for n, member in enumerate(result.front, 1):
        c = member.candidate
        vs = (f"{c.peak_reserved / default.peak_reserved - 1:+.1%}" if default and default.fits and c.conf
              else "-")
        table.add_row(str(n), *([c.conf or "default"] if with_setting else []), format_bytes(c.peak_reserved),
                      f"{c.ratio:.3f}" if c.ratio else "-", str(c.retries), str(c.keys), vs)
    return table
