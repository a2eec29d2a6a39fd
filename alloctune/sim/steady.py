"""The steady steps of a trace, and the driver work a replay counts per steady step (`results.records.DriverWork`).

A recording keeps where the job's steps ended (`meta["step_ends"]`: for each step, the number of trace events up
to its end; `trace.py` places them) and its warm-up (`meta["warmup_steps"]`, at least one step, as the start-up
hook and the trial child count it). The steady window is the steps after the warm-up, up to the end of the last
step: what comes before is start-up and warm-up (first-seen shapes, the cache growing), what comes after is the
job's teardown (freeing the model), neither of which a step pays for.

The replay reads the allocator's driver counters (`allocator.DRIVER_COUNTERS`) at the window's two ends; their
difference over the steps is the work per steady step. A trace without step marks, or with no step after its
warm-up, has no window: its driver work is the whole run's totals (`DriverWork.whole_run`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

from ..results.records import DriverWork

_FIGURES = [f.name for f in fields(DriverWork) if f.name not in ("steps", "whole_run")]


@dataclass(frozen=True)
class SteadyWindow:
    """Trace events [start, end) are the `steps` steady steps."""

    start: int
    end: int
    steps: int


def steady_window(meta: dict) -> SteadyWindow | None:
    """The steady steps of a trace with this meta; None when it has no step marks or no step after the warm-up."""
    ends = meta.get("step_ends") or []
    warmup = max(1, int(meta.get("warmup_steps") or 0))
    if len(ends) <= warmup:
        return None
    return SteadyWindow(ends[warmup - 1], ends[-1], len(ends) - warmup)


def per_step(start: Sequence[int], end: Sequence[int], steps: int) -> DriverWork:
    """The driver work between two readings of the counters (DRIVER_COUNTERS order), per step."""
    figures: dict[str, float] = {name: (b - a) / steps for name, a, b in zip(_FIGURES, start, end)}
    return DriverWork.from_json({"steps": steps, **figures})


def whole_run(counters: Sequence[int]) -> DriverWork:
    """The driver counters of a whole replay, as totals."""
    figures: dict[str, float] = {name: float(value) for name, value in zip(_FIGURES, counters)}
    return DriverWork.from_json({"steps": 0, "whole_run": True, **figures})
