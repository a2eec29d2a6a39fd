"""Steps counted inside a user's job, without changing its code: what the start-up hook (`hook/sitecustomize.py`)
does with each optimizer step, each call that --step-on names and each `alloctune.step()` mark.

Per process, `Counter` counts each source: every optimizer (by object), the --step-on calls, the marks. At the
end of step `warmup` of each counted source it synchronises the devices the process used and takes the timed
window's start; every step keeps the host's time of its end (`last`), and its Unix time (`step_ends_us`: where a
recorded trace's steps end). The source it follows, for the --steps window, the growth samples and those step ends, is the first of ThroughputSource's order that has steps: the marks, then the calls when
--step-on names some, else the optimizer that stepped most (`leader`: ties go to the first seen; a GAN's two
optimizers step alike and the first is followed). On the followed source's steps:

- at steps K and 2K (growth samples, `--check-growth K`): [step, reserved, allocated] of the process now;
- at step warmup + 4N/5 (80% of a window of N steps): the peak reserved so far;
- at step warmup + N: synchronise, take the window's end and the peak again, then `Job.finish()`, which writes
  the process's report and ends the process. Every rank counts the same steps, so all ranks stop at the same
  step, after that step's collectives completed (they complete before the optimizer steps).

Timed windows are not offered: ranks would stop at different steps, and one would wait in a collective for a
rank that had gone. The warm-up is at least one step: a window starts at the end of a step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence, TypeVar

from ..results.records import ThroughputSource
from .peaks import StepCount


class Job(Protocol):
    """What the counter asks of the process it counts in (the hook gives it; tests give stand-ins)."""

    def synced(self) -> float:
        """time.perf_counter() after the work queued on the process's devices has finished."""
        ...

    def reserved_peak(self) -> int | None:
        """The most peak reserved over the process's devices; None without CUDA."""
        ...

    def memory(self) -> tuple[int, int] | None:
        """(reserved, allocated) now, summed over the process's devices; None without CUDA."""
        ...

    def finish(self) -> None:
        """The window is over: write the process's report and end it."""
        ...


@dataclass
class _Source:
    source: ThroughputSource
    name: str
    count: int = 0
    start: float | None = None
    last: float | None = None
    end: float | None = None
    ends_us: list[int] = field(default_factory=list)   # Unix time in µs at the end of each step


Counted = TypeVar("Counted", _Source, StepCount)


def leader(counts: Iterable[Counted]) -> Counted | None:
    """The source that stepped most; ties go to the first seen (`counts` in the order first seen)."""
    return max(counts, key=lambda c: c.count, default=None)


class Counter:
    """One process's steps. `window`: end the process after this many steps past the warm-up (None: never);
    `growth`: sample memory at steps K and 2K of the followed source (None: never)."""

    def __init__(self, job: Job, warmup: int, window: int | None = None, growth: int | None = None,
                 call_name: str = ""):
        self.job = job
        self.warmup = max(1, warmup)
        self.window = window
        self.growth = growth
        self.call_name = call_name
        self.sources: list[_Source] = []          # first seen first
        self.optimizers: dict[int, _Source] = {}  # id(optimizer) -> its source
        self.calls: _Source | None = None
        self.marks = 0
        self.mark_ends_us: list[int] = []
        self.at_80: int | None = None
        self.window_reserved: list[int] | None = None
        self.growth_samples: list[list[int]] = []

    def optimizer_step(self, optimizer: object) -> None:
        source = self.optimizers.get(id(optimizer))
        if source is None:
            source = self.optimizers[id(optimizer)] = self._new(ThroughputSource.OPTIMIZER_STEPS,
                                                                 type(optimizer).__name__)
        self._count(source)

    def call(self) -> None:
        if self.calls is None:
            self.calls = self._new(ThroughputSource.STEP_CALLS, self.call_name)
        self._count(self.calls)

    def mark(self) -> None:
        """An alloctune.step() mark (runtime/steps.py keeps its time and units)."""
        self.marks += 1
        self.mark_ends_us.append(time.time_ns() // 1000)
        if self._watching:
            self._progress(self.marks, None)

    def at_exit(self, synced: float | None) -> list[StepCount]:
        """The counts for the process's report; `synced`: the time after the exit's synchronisation (None
        without CUDA), the end of every source whose window did not end."""
        return [StepCount(s.source, s.name, s.count, self.warmup, s.start, s.last,
                          s.end if s.end is not None else synced) for s in self.sources]

    def step_ends_us(self) -> list[int]:
        """The Unix time in µs at the end of each step of the source followed: the clock of a trace's `time_us`,
        so that a recording can say where among its entries the steps ended."""
        followed = self._followed()
        if isinstance(followed, str):
            return list(self.mark_ends_us)
        return [] if followed is None else list(followed.ends_us)

    @property
    def _watching(self) -> bool:
        return self.window is not None or self.growth is not None

    def _new(self, source: ThroughputSource, name: str) -> _Source:
        self.sources.append(_Source(source, name))
        return self.sources[-1]

    def _count(self, source: _Source) -> None:
        source.count += 1
        source.last = time.perf_counter()
        source.ends_us.append(time.time_ns() // 1000)
        if source.count == self.warmup:
            source.start = self.job.synced()
        if self._watching and self._followed() is source:
            self._progress(source.count, source)

    def _followed(self) -> _Source | str | None:
        """The source the window and the growth samples follow, in ThroughputSource's order."""
        if self.marks:
            return ThroughputSource.STEP_MARKS.value
        return self.calls if self.call_name else leader(self.optimizers.values())

    def _progress(self, step: int, source: _Source | None) -> None:
        if self.growth is not None and step in (self.growth, 2 * self.growth):
            if (memory := self.job.memory()) is not None:
                self.growth_samples.append([step, *memory])
        if self.window is None:
            return
        if step == self.warmup + 4 * self.window // 5:
            self.at_80 = self.job.reserved_peak()
        if step == self.warmup + self.window:
            end = self.job.synced()
            if source is not None:
                source.end = end
            peak = self.job.reserved_peak()
            self.window_reserved = [self.at_80, peak] if self.at_80 is not None and peak is not None else None
            self.job.finish()


def rising(window_reserved: Sequence[int] | None) -> bool | None:
    """Whether the peak reserved still rose in the window's last fifth; None where it was not read."""
    return None if window_reserved is None else window_reserved[1] > window_reserved[0]
