"""What `alloctune replay` shows: one trace's settings ranked by simulated peak reserved (beside what the GPU
measured under the same conditions, and the smallest device each fits on), and the maximum over several traces
(one per rank: what the job needs per GPU); the same figures as JSON."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text

from ..decide.maximum import Highest, TraceFigures
from ..results.provenance import Provenance, provenance
from ..settings.conf import conf_label
from ..settings.grid import Skip
from ..results.vocabulary import SIMULATED_TORCH
from ..sim.replay import Capacity, ReplayOutcome, measured_runs, measured_under
from ..sim.target import simulated_torch, simulated_with
from ..sim.steady import SteadyWindow, steady_window
from ..sim.trace import Trace
from ..units import format_bytes
from .layout import say
from .provenance import origin, title as provenance_title
from .tables import (driver_caption, driver_cells, driver_headers, figures_table, in_unit, keep_columns, print_numbered,
                     size_unit, whole_settings)

if TYPE_CHECKING:
    from rich.console import Console

    from .tables import Cell


@dataclass(frozen=True)
class TraceReplay:
    """One trace replayed under many settings, and what its report rests on."""

    path: str
    trace: Trace
    rows: list[tuple[ReplayOutcome, Capacity | None]]   # ranked (ReplayOutcome.sort_key); capacity: --min-memory
    skipped: list[Skip]
    measured: dict[str, dict]     # GPU measurements the trace holds, taken under this replay's conditions
    elsewhere: int                # GPU measurements of these settings taken under other conditions: not shown
    device_memory: int
    memory_from: str              # where the device memory came from, in words
    budget_bytes: int | None
    warnings: list[str]
    provenance: Provenance        # measured on a GPU, or a dry run for a card (report/provenance.py says it)

    @property
    def simulated_torch(self) -> str:
        """The torch whose allocator the replay followed ('2.11')."""
        return next((o.torch_version for o, _ in self.rows if o.torch_version),
                    simulated_torch(self.trace.meta.get("torch_version")))

    @property
    def window(self) -> SteadyWindow | None:
        """The steady steps the driver work is counted over; None: the whole run."""
        return steady_window(self.trace.meta)

    @classmethod
    def ranked(cls, path: str, trace: Trace, outcomes: list[ReplayOutcome], capacities: list[Capacity | None],
               skipped: list[Skip], device_memory: int, memory_from: str, budget_bytes: int | None,
               warnings: list[str]) -> "TraceReplay":
        rows = sorted(zip(outcomes, capacities), key=lambda row: row[0].sort_key())
        measured = measured_under(trace, device_memory, budget_bytes)
        elsewhere = sum(1 for o, _ in rows if o.conf in measured_runs(trace) and o.conf not in measured)
        return cls(path, trace, rows, skipped, measured, elsewhere, device_memory, memory_from, budget_bytes,
                   warnings, provenance(trace.meta))

    def figures(self) -> list[TraceFigures]:
        """The simulated settings' figures, for the maximum over several traces (`decide/maximum.py`)."""
        return [TraceFigures(self.path, o.setting, o.result.peak_reserved_bytes, o.result.num_ooms,
                             self.measured.get(o.conf, {}).get("peak_reserved_bytes"))
                for o, _ in self.rows if o.result is not None]

    def to_json(self) -> dict:
        """The trace, its warnings, `results` (one object per setting simulated, with its figures) and `skipped`
        (the settings without simulated figures: not simulated, or skipped for this torch; each with its reason,
        and what the GPU measured of it under these conditions, where the trace holds it)."""
        return {"trace": self.path, "dry_run": self.provenance.to_json(), SIMULATED_TORCH: self.simulated_torch,
                "warnings": self.warnings,
                "results": [_json_row(o, c, self.measured.get(o.conf)) for o, c in self.rows if o.result is not None],
                # a setting not simulated may still have been measured: the table's GPU column shows it, so does this
                "skipped": ([{"conf": o.conf, "reason": o.reason, **_measured(self.measured.get(o.conf))}
                             for o, _ in self.rows if o.result is None]
                            + [{"conf": s.conf, "reason": s.reason} for s in self.skipped])}


def _measured(measured: dict | None) -> dict:
    """What the GPU measured of a setting under this replay's conditions, as replay's JSON names it."""
    if measured and measured.get("peak_reserved_bytes") is not None:
        return {"measured_peak_reserved_bytes": measured["peak_reserved_bytes"]}
    return {}


def _json_row(outcome: ReplayOutcome, capacity: Capacity | None, measured: dict | None) -> dict:
    row = {**outcome.to_json(), **_measured(measured)}
    if capacity is not None:
        row.update(min_memory_bytes=capacity.fits_bytes, min_memory_no_retry_bytes=capacity.no_retry_bytes,
                   min_memory_granularity_bytes=capacity.granularity, min_memory_monotone=capacity.monotone)
    return row


def print_trace(console: Console, replayed: TraceReplay) -> None:
    """The trace's line, its warnings, the ranked table, and what the table leaves unsaid."""
    r = replayed
    say(console, Text.assemble((r.path, "bold"), f": {len(r.trace):,} events, {r.trace.num_allocs:,} allocations on "
                                 f"device {r.trace.device}, {simulated_with(r.simulated_torch)}; "
                                 f"device memory {format_bytes(r.device_memory)} ({r.memory_from})"
                                 + (f", budget {format_bytes(r.budget_bytes)}" if r.budget_bytes else "")
                                 + ("" if r.provenance.measured else f"; {origin(r.provenance)}")))
    for warning in r.warnings:
        say(console, Text.assemble(("warning:", "yellow"), " ", warning))
    headers, body = _trace_cells(r)
    # Within 100 columns: no retries or no OOMs anywhere is said once below instead of in a column of zeros.
    said = [[("-" if headers[j] in ("retry", "OOMs") and c == "0" else c) for j, c in enumerate(row)] for row in body]
    keep = keep_columns(headers, said, always=headers[:4])
    setting = headers.index("setting")
    with_capacity = bool(r.rows) and r.rows[0][1] is not None
    caption = ("res. = peak reserved, alloc. = peak allocated"
               + (", GPU = measured on the GPU under these conditions" if r.measured else "")
               + ("; fits from / no retry from: the smallest device memory" if with_capacity else "")
               + f"; {driver_caption(None if r.window is None else r.window.steps)}")
    simulated = [o.result for o, _ in r.rows if o.result is not None]
    fitting = sum(1 for x in simulated if not x.num_ooms)
    which = "settings that fit" if fitting == len(simulated) else f"{fitting} of {len(simulated)} settings fit"
    title = (provenance_title(r.provenance, f"Replayed: {which}, ranked by peak reserved")
             + ("; OOM = does not fit under this budget" if r.budget_bytes else "; OOM = does not fit on this device"))

    def table_of(labels: list[str]):
        rows = [[label if j == setting else row[j] for j in keep] for row, label in zip(body, labels)]
        return figures_table([headers[j] for j in keep], rows, title=title, caption=caption,
                             setting=keep.index(setting))

    print_numbered(console, *whole_settings(table_of, [str(row[setting]) for row in body], console.width))
    _print_notes(console, r, quiet=[name for name in ("retry", "OOMs") if headers.index(name) not in keep])


def _trace_cells(r: TraceReplay) -> tuple[list[str], list[list[Cell]]]:
    """Headers and cells of the ranked table, every column (the caller leaves out those with nothing to say)."""
    with_capacity = bool(r.rows) and r.rows[0][1] is not None
    results = [o.result for o, _ in r.rows if o.result is not None]
    unit = size_unit([x.peak_reserved_bytes for x in results] + [x.peak_allocated_bytes for x in results]
                     + [m.get("peak_reserved_bytes") for m in r.measured.values()]
                     + [c.no_retry_bytes for _, c in r.rows if c is not None])
    # Short headers (no word over 6 letters) keep the table within 100 columns; the caption spells them out.
    headers = ["#", "setting", f"peak\nres.\n{unit[0]}", f"peak\nalloc.\n{unit[0]}", "res/\nalloc", "retry", "OOMs",
               *driver_headers(r.window is None)]
    if r.measured:
        headers.append(f"GPU\nres.\n{unit[0]}")
    if with_capacity:
        headers += [f"fits\nfrom\n{unit[0]}", f"no\nretry\nfrom\n{unit[0]}"]
    body = []
    for rank, (outcome, capacity) in enumerate(r.rows, 1):
        x = outcome.result
        mark = "-" if x is None else Text("OOM", style="bold red") if x.num_ooms else str(rank)
        if x is None:
            cells = [mark, outcome.conf, Text("n/a", style="dim"), "", "", "", "", "", ""]
        else:
            ratio = f"{x.peak_reserved_bytes / x.peak_allocated_bytes:.3f}" if x.peak_allocated_bytes else "-"
            cells = [mark, outcome.conf, in_unit(x.peak_reserved_bytes, unit), in_unit(x.peak_allocated_bytes, unit),
                     ratio, str(x.num_alloc_retries), Text(str(x.num_ooms), style="red") if x.num_ooms else "0",
                     *driver_cells(x.driver_work)]
        if r.measured:
            cells.append(in_unit(r.measured.get(outcome.conf, {}).get("peak_reserved_bytes"), unit))
        if with_capacity:
            cells += [in_unit(capacity.fits_bytes, unit) if capacity else "-",
                      in_unit(capacity.no_retry_bytes, unit) if capacity else "-"]
        body.append(cells)
    return headers, body


def _print_notes(console: Console, r: TraceReplay, quiet: list[str]) -> None:
    """Below the table: settings not simulated or skipped, the columns left out, measurements not shown, and how
    exact the capacities are."""
    for outcome, _ in r.rows:
        if outcome.result is None:
            say(console, Text(f"not simulated (n/a) {outcome.conf}: {outcome.reason}", style="dim"))
    for skip in r.skipped:
        say(console, Text(skip.said, style="dim"))
    if quiet and any(o.result is not None for o, _ in r.rows):
        quiet = [{"retry": "an alloc retry", "OOMs": "an OOM"}[name] for name in quiet]
        say(console, Text(f"no setting had {' or '.join(quiet)}", style="dim"))
    if line := peak_steps_line([(o.conf, o.result.steps_before_peak) for o, _ in r.rows if o.result is not None],
                               len(r.trace.meta.get("step_ends") or [])):
        say(console, Text(line, style="dim"))
    if r.elsewhere:
        say(console, Text(f"{r.elsewhere} GPU measurement{'s' if r.elsewhere != 1 else ''} of these settings in the "
                          f"trace {'are' if r.elsewhere != 1 else 'is'} not shown: taken under other conditions "
                          f"(device memory or budget) than this replay's", style="dim"))
    if r.rows and (capacity := r.rows[0][1]) is not None:
        say(console, Text(f"Capacity is exact to {format_bytes(capacity.granularity)} and includes the memory the "
                          "CUDA context holds outside the allocator, when the trace recorded it."))


def peak_steps_line(steps_before_peak: list[tuple[str, int | None]], steps: int) -> str | None:
    """Where each setting's replay first reached its peak reserved, in the trace's steps (None without step marks):
    'peak reserved first reached in step 66 of 70 under every setting', or grouped by step where they differ."""
    known = [(conf, before) for conf, before in steps_before_peak if before is not None]
    if not known or not steps:
        return None

    def where(before: int) -> str:
        return f"in the teardown, after the last of {steps} steps" if before >= steps else \
            f"in step {before + 1} of {steps}"

    if len({before for _, before in known}) == 1:
        every = "every setting" if len(known) == len(steps_before_peak) else "every setting replayed to its end"
        return f"peak reserved first reached {where(known[0][1])} under {every}"
    groups: dict[int, list[str]] = {}
    for conf, before in known:
        groups.setdefault(before, []).append(conf_label(conf))
    return "peak reserved first reached: " + "; ".join(f"{where(before)} for {', '.join(confs)}"
                                                       for before, confs in groups.items())


def print_maximum(console: Console, maximum: list[Highest], traces: list[str], origins: list[Provenance]) -> None:
    """The table of `maximum` (`decide/maximum.py`) over `traces` (their paths, in the order given: a path never
    breaks, so the table names a trace by its number and the paths follow it, one a line) and where they come
    from (`origins`)."""
    unit = size_unit([x for r in maximum for x in (r.peak_reserved_bytes, r.measured_peak_reserved_bytes)])
    headers = ["setting", f"peak\nres.\n{unit[0]}", "OOMs", "in\ntrace", f"GPU\nres.\n{unit[0]}"]
    rows = [[row.conf, in_unit(row.peak_reserved_bytes, unit), str(row.num_ooms or 0),
             f"#{traces.index(row.trace) + 1}", in_unit(row.measured_peak_reserved_bytes, unit)]
            for row in maximum]
    keep = keep_columns(headers, rows, always=headers[:4])
    title = provenance_title(origins, f"Maximum over the {len(traces)} traces (the process that needs the most, per "
                                      f"setting)")
    caption = "res. = peak reserved" + (", GPU = measured on the GPU" if 4 in keep else "")

    def table_of(labels: list[str]):
        shown = [[label, *(row[j] for j in keep[1:])] for row, label in zip(rows, labels)]
        return figures_table([headers[j] for j in keep], shown, title=title, caption=caption, setting=0)

    table, below = whole_settings(table_of, [row[0] for row in rows], console.width)
    print_numbered(console, table, below + [f"  trace #{n}: {path}" for n, path in enumerate(traces, 1)])
