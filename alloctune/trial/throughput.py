"""Where a command trial's throughput comes from, in ThroughputSource's order of precedence (`timing`, the one
place that decides): a --metric-regex over the command's output (`metric_values`); the step marks of
`alloctune.step()` (units per second after the warm-up steps, summed over processes: `step_rate`); the calls
--step-on names, then optimizer steps, both counted by the hook without code changes (`runtime/counting.py`: steps
per second after the warm-up, times --unit's count per step, summed over processes: `counted_rate`); else the run's
wall time, one run = one unit (as hyperfine measures a command). The record says which
(`Measurement.throughput_source`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence

from ..results.records import ThroughputSource, is_rate
from ..runtime.counting import leader
from ..runtime.peaks import ProcessReport
from ..workload.command import CommandSpec
from .job import Run


@dataclass(frozen=True)
class Timing:
    """A command trial's throughput, and where it came from."""

    throughput: float | None   # units per second
    unit: str | None
    seconds: float | None      # the longest window measured
    steps: int | None          # steps in it
    source: ThroughputSource
    problem: str | None = None   # why the figure the job gave is no throughput (then `throughput` is None)


def timing(run: Run, command: CommandSpec, workload: dict) -> Timing:
    """The one place that decides where a command's throughput comes from: the first of ThroughputSource's
    order that the run gives (a --metric-regex, when given, even if it matched nothing). A figure that is no
    throughput (`is_rate`: -5 from a regex, negative units of alloctune.step, inf) is left out, and why is kept
    (the trial's `error`): the trial stays one its folder reads back."""
    timed = _timing(run, command, workload)
    if timed.throughput is None or is_rate(timed.throughput):
        return timed
    return replace(timed, throughput=None, problem=f"no throughput: {timed.source} gave {timed.throughput!r} "
                                                   f"{timed.unit}/s (expected a finite number above 0)")


def _timing(run: Run, command: CommandSpec, workload: dict) -> Timing:
    unit = workload["unit"]
    named = unit if unit != "runs" else None   # "runs" is what a command without --unit counts
    if command.metric_regex:
        values = metric_values(run.stdout, command.metric_regex) + metric_values(run.stderr, command.metric_regex)
        if not values:
            return Timing(None, unit, None, None, ThroughputSource.METRIC_REGEX)
        kept = values[1:] if len(values) > 1 else values   # the first report includes the start-up
        return Timing(sum(kept) / len(kept), unit, None, len(kept), ThroughputSource.METRIC_REGEX)
    rate = step_rate([p.steps for p in run.processes], int(workload["warmup_steps"]))
    if rate is not None:
        return Timing(rate[0], named or "units", rate[1], rate[2], ThroughputSource.STEP_MARKS)
    for source in (ThroughputSource.STEP_CALLS, ThroughputSource.OPTIMIZER_STEPS):
        if (rate := counted_rate(run.processes, source)) is not None:
            return Timing(rate[0] * (command.units_per_step or 1), named or "steps", rate[1], rate[2], source)
    return Timing(1 / run.wall_seconds if run.wall_seconds > 0 else None, "runs", run.wall_seconds, 1,
                  ThroughputSource.WALL_TIME)


def counted_rate(processes: Sequence[ProcessReport],
                 source: ThroughputSource) -> tuple[float, float, int] | None:
    """(steps/s summed over processes, longest window in seconds, steps in it) from the steps of `source` the
    hook counted, in each process the source that stepped most (`counting.leader`). A process's window runs from
    the end of its warm-up step to the end of its --steps window, both synchronised; without a window, to the
    host's time at its last step (the work still queued then is at most a few steps', against the whole window).
    None when no process counted more steps than its warm-up."""
    total, longest, steps = 0.0, 0.0, 0
    for p in processes:
        counted = leader(c for c in p.counted if c.source is source)
        if counted is None or counted.start is None or counted.count <= counted.warmup:
            continue
        end = counted.end if p.window_ended and counted.end is not None else counted.last
        if end is None or end <= counted.start:
            continue
        total += (counted.count - counted.warmup) / (end - counted.start)
        longest, steps = max(longest, end - counted.start), max(steps, counted.count - counted.warmup)
    return (total, longest, steps) if steps else None


def step_rate(marks_per_process: Sequence[Sequence[tuple[float, float]]],
              warmup: int) -> tuple[float, float, int] | None:
    """(units/s summed over processes, longest window in seconds, steps in it) from `alloctune.step` marks:
    each process's window runs from the end of its last warm-up step to its last mark. None when no process
    marked more steps than its warm-up."""
    warmup = max(1, warmup)
    total, longest, steps = 0.0, 0.0, 0
    for marks in marks_per_process:
        if len(marks) <= warmup:
            continue
        start, end = marks[warmup - 1][0], marks[-1][0]
        if end <= start:
            continue
        total += sum(u for _, u in marks[warmup:]) / (end - start)
        longest, steps = max(longest, end - start), max(steps, len(marks) - warmup)
    return (total, longest, steps) if steps else None


_METRIC_LINE_CHARS = 1 << 20


def metric_values(path: str, pattern: str) -> list[float]:
    """Numbers the regex finds in a file, in order: group 'value', else group 1, else the match; commas allowed
    as thousands separators."""
    regex = re.compile(pattern)
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            while line := f.readline(_METRIC_LINE_CHARS):   # a job's one line of gigabytes, read in pieces
                for match in regex.finditer(line):
                    text = (match.groupdict().get("value") or (match.group(1) if regex.groups else match.group(0)))
                    try:
                        out.append(float(text.replace(",", "")))
                    except (TypeError, ValueError):
                        continue
    except OSError:
        pass
    return out
