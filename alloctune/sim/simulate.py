"""Replaying a trace through the allocator: `simulate`, the loop every replay runs, on one of two cores.

- the compiled core (`alloctune/sim/_core.cpp`, a C++ extension built by `pip install -e .`, or in place by
  `python3 setup.py build_ext --inplace`): the same algorithm as `allocator.py`, with upstream's structures
  (blocks linked in address order, pools ordered by size and address; the cached blocks kept in size classes
  rather than upstream's std::set, for speed), 22-58x faster (results/sim-speed-2026-12-01/);
- the Python reference (`allocator.Allocator`), used where the extension is not built or does not load (no
  compiler at install time, another Python version): `core_notice()` says so in one line, which the CLI prints
  once.
Both give the same `SimResult`, field for field (tests/sim/test_sim_cores.py).

What a replay does after an OOM: it ends there, as the program would at an uncaught `torch.OutOfMemoryError`
(`first_oom_index` says where; the peaks and counters are those reached up to it, `num_ooms` is 1). Going on
would model a program that catches the error and keeps allocating, which no recorded trace shows.
`stop_at_retry=True` also ends the replay at the first release-and-retry, for callers that only need to
know whether one happens (capacity planning); `first_retry_index` says where, and `events_replayed` how far
the replay got.
"""
from __future__ import annotations

import sys
from bisect import bisect_left
from dataclasses import dataclass, fields
from itertools import count, islice
from typing import Any, Literal, Sequence

import numpy as np

from ..results.records import DriverWork
from ..settings.conf import AllocConf
from .allocator import MARK_COUNTERS, Allocator, memory_stats
from .config import AllocatorConfig, allocator_config
from .entries import FREE_REQUESTED
from .steady import SteadyWindow, per_step, whole_run

try:
    from . import _core  # type: ignore[attr-defined]
    _CORE_PROBLEM: str | None = None
except ImportError as exc:  # not built (no compiler at install), built for another Python, or broken
    _core = None
    _CORE_PROBLEM = (f"not built for Python {sys.version_info.major}.{sys.version_info.minor}"
                     if isinstance(exc, ModuleNotFoundError) or "cannot import name" in str(exc) else str(exc))

Core = Literal["auto", "compiled", "python"]


@dataclass(frozen=True)
class PackedOps:
    """A trace's four columns as int64 arrays: what the compiled core reads without converting a Python int
    per event. `pack` once, then simulate it under many settings."""

    kinds: np.ndarray
    addrs: np.ndarray
    sizes: np.ndarray
    streams: np.ndarray

    def __len__(self) -> int:
        return len(self.kinds)


def pack(ops: Any) -> PackedOps | Any:
    """`ops` packed for the compiled core; `ops` itself when that core is not here (the Python core reads
    lists faster) or its numbers do not fit 64 bits."""
    if _core is None or isinstance(ops, PackedOps):
        return ops
    try:
        return PackedOps(*(np.ascontiguousarray(c, dtype=np.int64)
                           for c in (ops.kinds, ops.addrs, ops.sizes, ops.streams)))
    except OverflowError:
        return ops


@dataclass(frozen=True)
class SimResult:
    conf: str
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    peak_requested_bytes: int
    num_alloc_retries: int
    num_ooms: int
    num_device_alloc: int
    num_device_free: int
    first_oom_index: int | None   # index of the op that ran out of memory; the replay ended there
    stats: dict
    first_retry_index: int | None = None  # index of the first op that needed a release-and-retry
    events_replayed: int = 0              # ops replayed: all of them unless an OOM (or stop_at_retry) ended it
    # per steady step of the `window` asked for, else over the whole run; None when the replay ended early (an
    # OOM, or stop_at_retry)
    driver_work: DriverWork | None = None
    # how many of the `step_ends` asked for had passed when the replay first reached peak_reserved_bytes: 0 = in the
    # first step (or the start-up before it), len(step_ends) = after the last (teardown); None without step ends, or
    # when the replay ended early
    steps_before_peak: int | None = None


def core_notice() -> str | None:
    """One line for the user when replays run on the slow Python core, else None."""
    if _core is not None:
        return None
    return (f"the compiled simulator core is not available ({_CORE_PROBLEM}): replaying with the pure-Python "
            "simulator, 22-58x slower (build it with `pip install -e .` or `python3 setup.py build_ext --inplace`)")


def simulate(ops: Any, conf: AllocConf, device_memory: int, *, budget_bytes: int | None = None,
             overhead_bytes: int = 0, torch_version: str = "2.11", stop_at_retry: bool = False,
             core: Core = "auto", window: SteadyWindow | None = None,
             step_ends: Sequence[int] | None = None) -> SimResult:
    """Replay `ops` (parallel sequences .kinds (0 alloc, 1 free, 2 empty_cache, 3-6 the pool events of CUDA graphs:
    `pools.py`, 7 a free requested before its block returns: `entries.py`), .addrs, .sizes, .streams) under `conf`.

    A trace address names the block allocated under it until it is freed. A free of an address that is not
    live (recording started mid-run) is ignored and counted in stats['ignored_frees']. `core` picks the
    compiled or the Python core; "auto" takes the compiled one when it is available. `window`: the steady steps
    the driver work is counted over (`steady.steady_window`); None: the whole run. `step_ends`: the trace's
    (`meta["step_ends"]`), for `steps_before_peak`.
    """
    config = allocator_config(conf, device_memory, budget_bytes=budget_bytes, overhead_bytes=overhead_bytes,
                              torch_version=torch_version)
    if core == "compiled" and _core is None:
        raise RuntimeError(core_notice())
    n = len(ops.kinds)
    if window is not None and not 0 <= window.start <= window.end <= n:
        raise ValueError(f"steady window {window} is not within the {n} events")
    ends = list(step_ends or [])
    if ends and (ends != sorted(ends) or ends[0] < 0 or ends[-1] > n):
        raise ValueError(f"step ends must be event indices in order, within the {n} events")
    marks = _Marks(window, ends, sorted({*ends, *([] if window is None else [window.start, window.end]), n}))
    if core != "python" and _core is not None:
        try:
            return _simulate_compiled(ops, config, stop_at_retry, marks)
        except OverflowError:  # a size or figure beyond the compiled core's 64-bit range: the Python core has none
            if core == "compiled":
                raise
    return _simulate_python(ops, conf, config, budget_bytes, torch_version, stop_at_retry, marks)


@dataclass(frozen=True)
class _Marks:
    """Where a replay reads `MARK_COUNTERS`: `at`, the event indices in order, each step end and the window's two
    ends (step ends themselves, for a trace's own window) and the trace's end."""

    window: SteadyWindow | None
    step_ends: list[int]
    at: list[int]

    def read(self, stats: dict, at_marks: list) -> tuple[DriverWork | None, int | None]:
        """The driver work and steps_before_peak from the counters read at each mark; neither when the replay
        ended before the last one."""
        if len(at_marks) < len(self.at):
            return None, None
        driver = {mark: row[:-1] for mark, row in zip(self.at, at_marks)}
        w = self.window
        work = whole_run(driver[self.at[-1]]) if w is None else per_step(driver[w.start], driver[w.end], w.steps)
        if not self.step_ends:
            return work, None
        # The peak was first reached before the first mark that holds it and after the mark before that one: as
        # every step end is a mark, the step ends before the first that holds it are those passed by then.
        first = next(mark for mark, row in zip(self.at, at_marks) if row[-1] == stats["reserved_bytes.all.peak"])
        return work, bisect_left(self.step_ends, first)


def _as_list(seq: Any) -> Any:
    # numpy arrays iterate as numpy scalars, which are slow and compare oddly as dict keys
    return seq.tolist() if hasattr(seq, "tolist") else seq


def _simulate_python(ops: Any, conf: AllocConf, config: AllocatorConfig, budget_bytes: int | None,
                     torch_version: str, stop_at_retry: bool, marks: _Marks) -> SimResult:
    alloc = Allocator(conf, config.device_memory, budget_bytes=budget_bytes, overhead_bytes=config.overhead,
                      torch_version=torch_version)
    malloc, free = alloc.malloc_block, alloc.free_block  # blocks, not handles: no lookup of the handle on free
    live: dict = {}  # trace address -> its allocated block
    pop = live.pop
    ignored = replayed = 0
    first_oom = first_retry = None
    at_marks: list[list[int]] = []
    ops_iter = zip(count(1), _as_list(ops.kinds), _as_list(ops.addrs), _as_list(ops.sizes), _as_list(ops.streams))
    # The events in pieces that end at the marks, where the mark counters are read.
    for bound in marks.at:
        for replayed, kind, addr, size, stream in islice(ops_iter, bound - replayed):
            if kind == 0:
                block = malloc(size, stream)
                if first_retry is None and alloc.num_alloc_retries:
                    first_retry = replayed - 1
                    if stop_at_retry:
                        if block is None:
                            first_oom = first_retry
                        break
                if block is None:
                    first_oom = replayed - 1
                    break
                live[addr] = block
            elif kind == 1:
                block = pop(addr, None)
                if block is None:
                    ignored += 1
                else:
                    free(block)
            elif kind == 2:
                alloc.empty_cache()
            elif kind == FREE_REQUESTED:
                block = live.get(addr)
                if block is not None:
                    alloc.free_requested(block)
            else:
                alloc.graphs.event(kind, addr, stream)
        else:
            at_marks.append([getattr(alloc, name) for name in MARK_COUNTERS])
            continue
        break
    stats = alloc.stats()
    stats["ignored_frees"] = ignored
    return _result(config, stats, first_oom, first_retry, replayed, *marks.read(stats, at_marks))


def _simulate_compiled(ops: Any, c: AllocatorConfig, stop_at_retry: bool, marks: _Marks) -> SimResult:
    columns = (ops.kinds, ops.addrs, ops.sizes, ops.streams)
    if not isinstance(ops, PackedOps):  # lists, or arrays of any dtype: read as Python ints
        columns = tuple(_as_list(c) for c in columns)
    setting = {f.name: getattr(c, f.name) for f in fields(c) if f.name != "label"}   # the core's named fields
    counters, ignored, first_oom, first_retry, replayed, at_marks = _core.simulate(
        *columns, stop_at_retry=stop_at_retry, marks=marks.at, **setting)
    stats = memory_stats(counters, c.max_split)
    stats["ignored_frees"] = ignored
    return _result(c, stats, None if first_oom < 0 else first_oom, None if first_retry < 0 else first_retry, replayed,
                   *marks.read(stats, at_marks))


def _result(c: AllocatorConfig, stats: dict, first_oom: int | None, first_retry: int | None,
            replayed: int, driver_work: DriverWork | None, steps_before_peak: int | None) -> SimResult:
    return SimResult(
        conf=c.label,
        peak_reserved_bytes=stats["reserved_bytes.all.peak"],
        peak_allocated_bytes=stats["allocated_bytes.all.peak"],
        peak_requested_bytes=stats["requested_bytes.all.peak"],
        num_alloc_retries=stats["num_alloc_retries"],
        num_ooms=stats["num_ooms"],
        num_device_alloc=stats["num_device_alloc"],
        num_device_free=stats["num_device_free"],
        first_oom_index=first_oom,
        stats=stats,
        first_retry_index=first_retry,
        events_replayed=replayed,
        driver_work=driver_work,
        steps_before_peak=steps_before_peak,
    )
