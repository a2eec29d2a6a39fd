"""`alloctune replay`: replay a recorded allocation trace under many settings, offline, and rank them."""
from __future__ import annotations

import argparse
import json
from typing import Callable

from ..errors import AlloctuneError
from .args import positive_int


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
    p.add_argument("--device-memory", metavar="SIZE",
                   help="device memory, e.g. 24GiB or 143771MiB (default: the recording GPU's, else an H200's)")
    p.add_argument("--budget", metavar="SIZE",
                   help="memory limit as a size (24GiB) or a fraction of the device (0.5), like sweep --budget")
    p.add_argument("--overhead", metavar="SIZE",
                   help="device memory held outside the allocator (CUDA context, libraries); default: what the "
                        "trace recorded, else 1GiB")
    p.add_argument("--device", type=int, help="which device's trace, when the snapshot has several")
    p.add_argument("--min-memory", action="store_true",
                   help="also find, per setting, the smallest device memory without OOM and without retries "
                        "(to 2 MiB; the whole device, --budget does not apply)")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: all usable cores)")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object: the trace, its warnings, and results, one object per setting (for "
                        "several traces: traces, a list of those, and maximum)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..settings.grid import load_grid_file

    if (args.trace + [args.grid]).count("-") > 1:
        raise AlloctuneError("'-' (stdin) can be given once, among the traces and --grid")
    grid = load_grid_file(args.grid) if args.grid else []   # read once, for every trace
    replayed = [_replay_one(args, path, grid) for path in args.trace]
    if len(replayed) == 1:
        if args.json:
            print(json.dumps(replayed[0], indent=2))
        return 0
    maximum = _maximum(replayed)
    if args.json:
        print(json.dumps({"traces": replayed, "maximum": maximum}, indent=2))
    else:
        _print_maximum(maximum, len(replayed))
    return 0


def _maximum(replayed: list[dict]) -> list[dict]:
    """Per setting, the trace (rank) with the highest simulated peak reserved: what the job needs per GPU."""
    best: dict[str, dict] = {}
    for one in replayed:
        path = one["trace"]
        for row in one["results"]:
            if row.get("skipped") or row.get("peak_reserved_bytes") is None:
                continue
            if row["conf"] not in best or row["peak_reserved_bytes"] > best[row["conf"]]["peak_reserved_bytes"]:
                best[row["conf"]] = {"conf": row["conf"], "peak_reserved_bytes": row["peak_reserved_bytes"],
                                     "num_ooms": row.get("num_ooms"), "trace": path,
                                     "measured_peak_reserved_bytes": row.get("measured_peak_reserved_bytes")}
    return sorted(best.values(), key=lambda r: (bool(r["num_ooms"]), r["peak_reserved_bytes"]))


def _print_maximum(maximum: list[dict], count: int) -> None:
    from rich import box
    from rich.table import Table

    from ..report.tables import add_setting_column, in_unit, keep_columns, size_unit, whole_settings
    from .args import console

    unit = size_unit([r[key] for r in maximum for key in ("peak_reserved_bytes", "measured_peak_reserved_bytes")])
    headers = ["setting", f"peak\nres.\n{unit[0]}", "OOMs", "in trace", f"GPU\nres.\n{unit[0]}"]
    rows = [[row["conf"] or "default", in_unit(row["peak_reserved_bytes"], unit), str(row["num_ooms"] or 0),
             row["trace"], in_unit(row["measured_peak_reserved_bytes"], unit)] for row in maximum]
    keep = keep_columns(headers, rows, always=headers[:4])

    def table_of(labels: list[str]) -> Table:
        table = Table(title=f"Maximum over the {count} traces (the process that needs the most, per setting)",
                      caption="res. = peak reserved" + (", GPU = measured on the GPU" if 4 in keep else ""),
                      box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for j in keep:
            if j == 0:
                add_setting_column(table, labels)
            elif j == 3:   # a path folds within 24 columns: the settings and figures come first
                table.add_column(headers[j], overflow="fold", max_width=24)
            else:
                table.add_column(headers[j], justify="right", no_wrap=True)
        for row, label in zip(rows, labels):
            table.add_row(label, *(row[j] for j in keep[1:]))
        return table

    out = console()
    table, below = whole_settings(table_of, [row[0] for row in rows], out.width)
    out.print(table)
    for line in below:
        out.print(line, soft_wrap=True)


def _replay_one(args: argparse.Namespace, path: str, grid: list) -> dict:
    """Replay one trace; print its table (unless --json); return its JSON: the trace, warnings, results."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..report.progress import Phases
    from ..settings.conf import AllocConf
    from ..settings.grid import DEFAULT_GRID, apply_rules, expand, refuse_rejected
    from ..sim.replay import measured_runs, measured_under, min_memory_many, replay
    from ..sim.simulate import core_notice
    from ..sim.trace import load_trace
    from .args import console, replay_limits, replay_warnings

    with Phases(console(stderr=True)) as shown:   # a spinner only, gone when the trace is in
        shown.phase(f"loading {path}")
        trace = load_trace(path, device=args.device)
    entries = (args.conf or []) + grid
    confs = expand(entries) if entries else [AllocConf.parse(c) for c in DEFAULT_GRID]
    device_memory, memory_from, budget_bytes, overhead = replay_limits(args, trace)

    # The sweep's rules apply here too (e.g. GC does nothing without a budget), so both rank the same grid.
    torch_version = trace.meta.get("torch_version")
    confs, skipped = apply_rules(confs, torch_version, has_budget=budget_bytes is not None)
    if entries:   # settings the user named: a typo stops here instead of being dropped
        refuse_rejected(skipped, torch_version)

    err = console(stderr=True)
    if path == args.trace[0] and (note := core_notice()):   # once, not per trace
        err.print(f"[yellow]notice:[/] {note}")
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        def progress_of(description: str) -> Callable[[int, int], None]:
            task = bar.add_task(description, total=len(confs))
            return lambda done, total: bar.update(task, completed=done, total=total)

        outcomes = replay(trace, confs, device_memory, budget_bytes=budget_bytes, overhead_bytes=overhead,
                          jobs=args.jobs, progress=progress_of("replay"))
        capacities = (min_memory_many(trace, confs, overhead_bytes=overhead, jobs=args.jobs,
                                      progress=progress_of("smallest device (--min-memory)"))
                      if args.min_memory else [None] * len(confs))
    rows = sorted(zip(outcomes, capacities), key=lambda row: row[0].sort_key())

    measured = measured_under(trace, device_memory, budget_bytes)
    # Settings measured on the GPU under other conditions: not comparable, so not shown, but said.
    elsewhere = sum(1 for o, _ in rows if o.conf in measured_runs(trace) and o.conf not in measured)
    warnings = replay_warnings(trace, memory_from, torch_version)
    if not args.json:
        _print_table(path, trace, rows, skipped, measured, device_memory, memory_from, budget_bytes, elsewhere,
                     warnings)
    return {"trace": path, "warnings": warnings,
            "results": ([_json_row(o, c, measured.get(o.conf)) for o, c in rows]
                        + [{"conf": s.conf, "simulated": False, "skipped": True, "reason": s.reason}
                           for s in skipped])}


def _json_row(outcome, capacity, measured) -> dict:
    row = outcome.to_json()
    if measured and measured.get("peak_reserved_bytes") is not None:
        row["measured_peak_reserved_bytes"] = measured["peak_reserved_bytes"]
    if capacity is not None:
        row.update(min_memory_bytes=capacity.fits_bytes, min_memory_no_retry_bytes=capacity.no_retry_bytes,
                   min_memory_granularity_bytes=capacity.granularity, min_memory_monotone=capacity.monotone)
    return row


def _print_table(path, trace, rows, skipped, measured, device_memory, memory_from, budget_bytes,
                 elsewhere: int, warnings: list[str]) -> None:
    from rich import box
    from rich.table import Table

    from ..report.tables import add_setting_column, in_unit, keep_columns, size_unit, whole_settings
    from ..units import format_bytes
    from .args import console as wide_console

    console = wide_console()
    console.print(f"[bold]{path}[/]: {len(trace):,} events, {trace.num_allocs:,} allocations on device "
                  f"{trace.device}; device memory {format_bytes(device_memory)} ({memory_from})"
                  + (f", budget {format_bytes(budget_bytes)}" if budget_bytes else ""))
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    with_capacity = rows and rows[0][1] is not None
    results = [o.result for o, _ in rows if o.result is not None]
    unit = size_unit([r.peak_reserved_bytes for r in results] + [r.peak_allocated_bytes for r in results]
                     + [m.get("peak_reserved_bytes") for m in measured.values()]
                     + [c.no_retry_bytes for _, c in rows if c is not None])
    # Short headers (no word over 6 letters) keep the table within 100 columns; the caption spells them out.
    headers = ["#", "setting", f"peak\nres.\n{unit[0]}", f"peak\nalloc.\n{unit[0]}", "res/\nalloc",
               "retry", "OOMs"]
    if measured:
        headers.append(f"GPU\nres.\n{unit[0]}")
    if with_capacity:
        headers += [f"fits\nfrom\n{unit[0]}", f"no\nretry\nfrom\n{unit[0]}"]
    body = []
    for rank, (outcome, capacity) in enumerate(rows, 1):
        r = outcome.result
        mark = "-" if r is None else "[bold red]OOM[/]" if r.num_ooms else str(rank)
        if r is None:
            cells = [mark, outcome.conf, "[dim]n/a[/]", "", "", "", ""]
        else:
            ratio = f"{r.peak_reserved_bytes / r.peak_allocated_bytes:.3f}" if r.peak_allocated_bytes else "-"
            cells = [mark, outcome.conf, in_unit(r.peak_reserved_bytes, unit),
                     in_unit(r.peak_allocated_bytes, unit), ratio, str(r.num_alloc_retries),
                     f"[red]{r.num_ooms}[/]" if r.num_ooms else "0"]
        if measured:
            cells.append(in_unit(measured.get(outcome.conf, {}).get("peak_reserved_bytes"), unit))
        if with_capacity:
            cells += [in_unit(capacity.fits_bytes, unit) if capacity else "-",
                      in_unit(capacity.no_retry_bytes, unit) if capacity else "-"]
        body.append(cells)
    # Within 100 columns: no retries or no OOMs anywhere is said once below instead of in a column of zeros.
    said = [[("-" if headers[j] in ("retry", "OOMs") and c == "0" else c) for j, c in enumerate(row)] for row in body]
    keep = keep_columns(headers, said, always=headers[:4])

    def table_of(labels: list[str]) -> Table:
        table = Table(title="Simulated (replay): settings that fit, ranked by peak reserved"
                            + ("; OOM = does not fit under this budget" if budget_bytes else
                               "; OOM = does not fit on this device"), box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True,
                      caption="res. = peak reserved, alloc. = peak allocated"
                              + (", GPU = measured on the GPU under these conditions" if measured else "")
                              + ("; fits from / no retry from: the smallest device memory" if with_capacity
                                 else ""))
        for j in keep:
            if headers[j] == "setting":
                add_setting_column(table, labels)
            else:
                table.add_column(headers[j], justify="right", overflow="fold")
        for row, label in zip(body, labels):
            table.add_row(*(label if headers[j] == "setting" else row[j] for j in keep))
        return table

    table, below = whole_settings(table_of, [row[1] for row in body], console.width)
    console.print(table)
    for line in below:
        console.print(line, soft_wrap=True)
    for outcome, _ in rows:
        if outcome.result is None:
            console.print(f"[dim]not simulated (n/a) {outcome.conf}: {outcome.reason}[/]")
    for skip in skipped:
        console.print(f"[dim]skipped {skip.conf}: {skip.reason}[/]")
    quiet = [name for name in ("retry", "OOMs") if headers.index(name) not in keep and results]
    if quiet:
        console.print(f"[dim]no setting had {' or '.join(quiet).replace('OOMs', 'an OOM').replace('retry', 'an alloc retry')}[/]")
    if elsewhere:
        console.print(f"[dim]{elsewhere} GPU measurement(s) of these settings in the trace are not shown: they were "
                      f"taken under other conditions (device memory or budget) than this replay's[/]")
    if with_capacity:
        console.print(f"Capacity is exact to {format_bytes(rows[0][1].granularity)} and includes the memory the "
                      "CUDA context holds outside the allocator, when the trace recorded it.")
