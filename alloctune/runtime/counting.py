"""Steps counted inside a user's job, without changing its code: what the start-up hook (`hook/sitecustomize.py`)
does with each optimizer step, each call that --step-on names and each `alloctune.step()` mark.

Per process, `Counter` counts each source: the marks, the --step-on calls, and the optimizers, in chains (one
rule, `Counter._succeed` and `_settle`): an optimizer that starts stepping after another one's last step, once that
one is dead (garbage-collected), continues its chain, so that a search loop that builds a model and its optimizer
per trial is one source whose steps add up and whose time runs over every trial; optimizers alive and stepping at
once (a GAN's generator and discriminator) stay separate. At the end of step `warmup` of each counted source it
synchronises the devices the process used and takes the timed window's start; every step keeps the host's time of
its end (`last`), and, in a process that records (`ends`), its Unix time (`step_ends_us`: where a recorded trace's
steps end; nothing else reads them, so a long job that records nothing keeps no list per step). The source it
follows, for the windows, the growth samples and those step ends, is the first of ThroughputSource's order that has
steps: the marks, then the calls when --step-on names some, else the optimizer chain that stepped most (`leader`:
ties go to the first seen; a GAN's two optimizers step alike and the first is followed). On the followed source's
steps:

- at steps K and 2K (growth samples, `--check-growth K`): [step, reserved, allocated] of the process now;
- at step warmup + 4N/5 (80% of a window of N steps): the peak reserved so far;
- on every step from the end of the warm-up, an in-process confirmation's alternation (`alternate.py`), which
  switches settings at block boundaries and may end the process as the automatic window does (which waits for it);
- at step warmup + N, or at the step every process agreed on once the automatic window's rule was met
  (`stopping.py`: a confirmation trial's early stop): synchronise, take the window's end and the peak again, then
  `Job.finish()`, which writes the process's report and ends the process. Every rank counts the same steps, so
  all ranks stop at the same step, after that step's collectives completed (they complete before the optimizer
  steps).

Timed windows are not offered: ranks would stop at different steps, and one would wait in a collective for a
rank that had gone; the automatic window, though timed, ends at a step all processes read from one file. The
warm-up is at least one step: a window starts at the end of a step. A chain that an optimizer held in a reference
cycle continues joins it at the collection that frees that one, which ranks may reach at different steps: a
torchrun search loop whose optimizers die only by collection may then stop its ranks apart.
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, TypeVar

from ..results.records import ThroughputSource
from .alternate import Alternator
from .peaks import StepCount
from .stopping import AHEAD_STEPS, MIN_STEADY_STEPS, SharedStop, Spread, enough


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


@dataclass(eq=False)
class _Source:
    source: ThroughputSource
    name: str
    count: int = 0
    start: float | None = None
    start_at: int = 0             # the step at whose end `start` was taken
    last: float | None = None
    end: float | None = None
    ends_us: list[int] = field(default_factory=list)   # Unix time in µs at the end of each step (Counter.ends)
    spread: Spread = field(default_factory=Spread)     # its step durations since its start (before: since its first)


@dataclass(eq=False)
class _Chain(_Source):
    """Optimizers that stepped one after another: the latest (`head`, a weak reference) and what it may continue."""

    head: Callable[[], object | None] = lambda: None
    head_id: int = 0
    optimizers: int = 1
    first: float = 0.0            # host time at the end of its first step
    first_tick: int = 0           # of its first and last steps, in the order of all optimizer steps
    last_tick: int = 0
    waits: list[_Chain] = field(default_factory=list)   # chains alive at its first step that it may yet continue


Counted = TypeVar("Counted", _Source, StepCount)


def leader(counts: Iterable[Counted]) -> Counted | None:
    """The source that stepped most; ties go to the first seen (`counts` in the order first seen)."""
    return max(counts, key=lambda c: c.count, default=None)


class Counter:
    """One process's steps. `window`: end the process after this many steps past the warm-up (None: never);
    `growth`: sample memory at steps K and 2K of the followed source (None: never); `early`: end it where the
    automatic window's rule agrees (`stopping.py`; None: never); `ends`: keep each step's Unix time for
    `step_ends_us` (a process that records a trace; without, `step_ends_us` is empty); `peak_step`: the step in
    which the replay of this setting reached its peak reserved (0: unknown): a confirmation's automatic window does
    not end, nor its alternation begin, before that step has run, so that the memory it reports covers the peak."""

    def __init__(self, job: Job, warmup: int, window: int | None = None, growth: int | None = None,
                 call_name: str = "", early: SharedStop | None = None, ends: bool = False,
                 alternation: Alternator | None = None, peak_step: int = 0):
        self.job = job
        self.alternation = alternation            # an in-process confirmation (`alternate.py`): told every step
        self.peak_step = peak_step
        self.ends = ends
        self.warmup = max(1, warmup)
        self.window = window
        self.growth = growth
        self.call_name = call_name
        self.early = early
        self.sources: list[_Source] = []          # first seen first
        self.chains: list[_Chain] = []            # the optimizer sources, first seen first
        self.optimizers: dict[int, _Chain] = {}   # id(optimizer) -> its chain, for each chain's latest optimizer
        self.ticks = 0                            # optimizer steps so far
        self.calls: _Source | None = None
        self.marks = _Source(ThroughputSource.STEP_MARKS, "alloctune.step")
        self.at_80: int | None = None
        self.at_80_read = False
        self.growth_taken = 0
        self.agreed: int | None = None            # the automatic window's last step, once agreed
        self.auto_ended = False                   # the automatic window, not --steps, ended the process
        self.window_reserved: list[int] | None = None
        self.growth_samples: list[list[int]] = []

    def optimizer_step(self, optimizer: object) -> None:
        self.ticks += 1
        chain = self.optimizers.get(id(optimizer))
        if chain is None or chain.head() is not optimizer:
            chain = self._succeed(optimizer)
        elif chain.waits:
            chain = self._settle(chain)
        chain.last_tick = self.ticks
        self._count(chain)

    def call(self) -> None:
        if self.calls is None:
            self.calls = self._new(ThroughputSource.STEP_CALLS, self.call_name)
        self._count(self.calls)

    def mark(self) -> None:
        """An alloctune.step() mark (runtime/steps.py keeps its time and units)."""
        self._count(self.marks)

    def at_exit(self, synced: float | None) -> list[StepCount]:
        """The counts for the process's report; `synced`: the time after the exit's synchronisation (None
        without CUDA), the end of every source whose window did not end."""
        return [StepCount(s.source, s.name, s.count, s.start_at if s.start is not None else self.warmup, s.start,
                          s.last, s.end if s.end is not None else synced,
                          s.optimizers if isinstance(s, _Chain) else 0) for s in self.sources]

    def step_ends_us(self) -> list[int]:
        """The Unix time in µs at the end of each step of the source followed: the clock of a trace's `time_us`,
        so that a recording can say where among its entries the steps ended; [] unless the counter keeps `ends`."""
        followed = self._followed()
        return [] if followed is None else list(followed.ends_us)

    @property
    def _watching(self) -> bool:
        return (self.window is not None or self.growth is not None or self.early is not None
                or self.alternation is not None)

    def _new(self, source: ThroughputSource, name: str) -> _Source:
        self.sources.append(_Source(source, name))
        return self.sources[-1]

    def _succeed(self, optimizer: object) -> _Chain:
        """An optimizer's first step: it continues the first-seen chain whose latest optimizer is dead (every step
        of that one came before this one); else it starts a chain, which may continue one of those alive now once
        that one dies without stepping again (`_settle`)."""
        chain = next((c for c in self.chains if c.head() is None), None)
        if chain is not None:
            self.optimizers.pop(chain.head_id, None)
            chain.optimizers += 1
        else:
            chain = _Chain(ThroughputSource.OPTIMIZER_STEPS, type(optimizer).__name__, first=time.perf_counter(),
                           first_tick=self.ticks, waits=list(self.chains))
            self.sources.append(chain)
            self.chains.append(chain)
        chain.head, chain.head_id = weakref.ref(optimizer), id(optimizer)
        self.optimizers[id(optimizer)] = chain
        return chain

    def _settle(self, chain: _Chain) -> _Chain:
        """A later step of a chain that may continue another: a chain that stepped since this one's first step ran
        alongside it (no longer a candidate); one whose optimizer has died since takes this chain's steps."""
        chain.waits = [w for w in chain.waits if w.last_tick < chain.first_tick and w in self.chains]
        done = next((w for w in chain.waits if w.head() is None), None)
        if done is None:
            return chain
        self._merge(chain, done)
        return done

    def _merge(self, later: _Chain, into: _Chain) -> None:
        """`later`'s steps, all after `into`'s, continue `into`: counts add up, its time runs on through them."""
        assert into.last is not None
        if into.start is None and later.start is not None:
            into.start, into.start_at, into.spread = later.start, into.count + later.start_at, later.spread
        else:
            into.spread.add(later.first - into.last)
            into.spread.absorb(later.spread)
        into.count += later.count
        into.last, into.last_tick, into.end = later.last, later.last_tick, later.end
        into.ends_us += later.ends_us
        self.optimizers.pop(into.head_id, None)
        into.head, into.head_id, into.optimizers = later.head, later.head_id, into.optimizers + later.optimizers
        self.optimizers[later.head_id] = into
        self.sources.remove(later)
        self.chains.remove(later)

    def _count(self, source: _Source) -> None:
        now = time.perf_counter()
        if source.last is not None:
            source.spread.add(now - source.last)
        source.count += 1
        source.last = now
        if self.ends:
            source.ends_us.append(time.time_ns() // 1000)
        if source.start is None and source.count >= self.warmup:
            source.start, source.start_at, source.spread = self.job.synced(), source.count, Spread()
        if self._watching and self._followed() is source:
            self._progress(source)

    def _followed(self) -> _Source | None:
        """The source the windows and the growth samples follow, in ThroughputSource's order."""
        if self.marks.count:
            return self.marks
        return self.calls if self.call_name else leader(self.chains)

    def _progress(self, source: _Source) -> None:
        step = source.count
        if self.growth is not None and self.growth_taken < 2 and step >= self.growth * (self.growth_taken + 1):
            self.growth_taken += 1
            if (memory := self.job.memory()) is not None:
                self.growth_samples.append([step, *memory])
        if self.window is not None and not self.at_80_read and step >= self.warmup + 4 * self.window // 5:
            self.at_80_read, self.at_80 = True, self.job.reserved_peak()
        begin = max(source.start_at, self.peak_step)   # the alternation's first block starts at this step's end
        ended = (self.alternation is not None and source.start is not None and step >= begin
                 and self.alternation.step(step, step - begin))
        stop = self._stop(source)
        if not ended and (stop is None or step < stop):
            return
        self.auto_ended = ended or self.window is None or (stop is not None and stop < self.warmup + self.window)
        source.end = self.job.synced()
        peak = self.job.reserved_peak()
        self.window_reserved = [self.at_80, peak] if self.at_80 is not None and peak is not None else None
        self.job.finish()

    def _stop(self, source: _Source) -> int | None:
        """The step the followed source ends at: the --steps window's, or the automatic window's once every
        process agrees on it (proposed by the first whose steps met `stopping.enough`), whichever comes first."""
        steady = source.count - source.start_at
        alternating = self.alternation is not None and self.alternation.active
        if (self.early is not None and not alternating and self.agreed is None and source.start is not None
                and steady >= MIN_STEADY_STEPS and source.count >= self.peak_step):
            assert source.last is not None
            if enough(steady, source.last - source.start, source.spread):
                self.agreed = self.early.propose(source.count + AHEAD_STEPS)
            else:
                self.agreed = self.early.read()
        stops = [s for s in (self.agreed, self.warmup + self.window if self.window is not None else None)
                 if s is not None]
        return min(stops, default=None)
