"""replay: one or several traces (one per rank) replayed under settings, offline, each trace's settings ranked,
and for several the maximum per setting (what the job needs per GPU). `alloctune replay` and
`alloctune.replay()`."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import OptionError, OptionText, shown
from ..decide.maximum import Highest, maximum
from ..report.replay import TraceReplay
from ..settings.conf import AllocConf
from ..sim.replay import ReplayOutcome
from ..sim.trace import Trace
from .checks import Progress, device_index, given, in_bytes, quiet, set_field, size, workers
from .inputs import DeviceLimits, TraceInput, budget_limit, check_traces_and_grid, held, loaded, name_of
from .options import options_of


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay, and on what device. Sizes are bytes or strings such as '24GiB' (held in bytes)."""

    traces: TraceInput | Sequence[TraceInput] = ()   # one trace, or one per rank: each replayed, then the maximum
    confs: Sequence[str | AllocConf] = ()        # settings to replay ('default' for the default; default: the grid)
    grid: str | os.PathLike | None = None        # a file listing more settings ('-' for stdin; a list: confs)
    device_memory: int | str | None = None       # default: the recording GPU's, else sim/limits.py's
    # a limit as a size ('24GiB') or a fraction of the device (0.5); default, for a snapshot taken at an OOM with no
    # device_memory given: what it says the process could have (`DeviceLimits.of`), else none
    budget: str | int | float | None = None
    overhead: int | str | None = None            # outside the allocator (default: what the trace recorded, else 1GiB)
    device: int | None = None                    # which device's trace, when a snapshot has several
    min_memory: bool = False                     # also the smallest device each setting fits on (to 2 MiB)
    jobs: int | None = None                      # worker processes (default: every usable core)
    torch_version: str | None = None             # whose allocator to follow (default: the recording's)

    def __post_init__(self) -> None:
        check_traces_and_grid(self)
        for name, least in (("device_memory", 1), ("overhead", 0)):
            if getattr(self, name) is not None:
                set_field(self, name, size(getattr(self, name), name, least))
        budget_limit(self.budget)
        device_index(self.device)
        if not isinstance(self.min_memory, bool):
            raise OptionError("min_memory", "{min_memory}: expected True or False, got {got}",
                              got=shown(self.min_memory))
        workers(self.jobs)
        if self.torch_version is not None and not isinstance(self.torch_version, str):
            raise OptionError("torch_version", "{torch_version}: expected a version such as '2.11.0', got {got}",
                              got=shown(self.torch_version))


@dataclass(frozen=True)
class ReplayResult:
    """Each trace's replay (its settings ranked, with what the ranking rests on), in the order given; for several
    traces, per setting the one that needs the most (`decide/maximum.py`'s rows)."""

    replays: tuple[TraceReplay, ...]
    maximum: tuple[Highest, ...] | None = None

    @property
    def outcomes(self) -> list[ReplayOutcome]:
        """The settings of the trace replayed, ranked (of the first where several were: `replays` holds each); an
        outcome's `result` is None for a setting that cannot be simulated, and its `reason` says why."""
        return [outcome for outcome, _ in self.replays[0].rows]

    def to_json(self) -> dict:
        """The trace, its warnings, results and skipped; for several traces: traces, a list of those, and maximum."""
        if self.maximum is None:
            return self.replays[0].to_json()
        return {"traces": [r.to_json() for r in self.replays], "maximum": [h.to_json() for h in self.maximum]}


def replay(traces: TraceInput | Sequence[TraceInput] | None = None,
           confs: Sequence[str | AllocConf] | str | None = None, options: ReplayOptions | None = None, *,
           progress: Progress | None = None, **fields: Any) -> ReplayResult:
    """Simulate each trace under the settings named (with the default; none named: the default grid), under the
    sweep's rules (a setting the trace's torch rejects, a misspelt key, stops the call), and rank them by peak
    reserved. `traces`: a path, a Trace, or a list of them (one per rank); `confs`: the settings; `options`
    (ReplayOptions) or its fields as keywords: `replay("a.xz", ["expandable_segments:True"], device_memory="24GiB")`.
    `grid` is a file listing more settings, as in fleet and fit (sweep's `grid` is the list of settings itself)."""
    from ..settings.grid import load_grid_file   # loads yaml: not at every command's start-up

    options = options_of("replay", ReplayOptions, options, given(fields, traces=traces, confs=confs))
    said = progress or quiet
    entries = [*options.confs, *(load_grid_file(options.grid) if options.grid else [])]   # read once, for all
    replays = tuple(_one(options, source, i, entries, said) for i, source in enumerate(held(options.traces)))
    if len(replays) == 1:
        return ReplayResult(replays)
    return ReplayResult(replays, tuple(maximum(f for r in replays for f in r.figures())))


def _one(options: ReplayOptions, source: str | Trace, index: int, entries: list, said: Progress) -> TraceReplay:
    from ..settings.grid import ranked_settings
    from ..sim.replay import min_memory_many, replay as replay_trace
    from ..sim.target import Target

    name = name_of(source, index)
    said(f"loading {name}", None)
    trace = loaded(source, options.device)
    limits = DeviceLimits.of(trace, in_bytes(options.device_memory), budget_limit(options.budget),
                             in_bytes(options.overhead))
    # The sweep's rules apply here too (e.g. GC does nothing without a budget), so both rank the same grid.
    target = Target(trace.meta.get("torch_version"), options.torch_version, "torch_version")
    confs, skipped = ranked_settings(entries, target.version, has_budget=limits.budget_bytes is not None)

    def counted(phase: str):
        said(phase, (0, len(confs)))
        return lambda done, total: said(phase, (done, total))

    outcomes = replay_trace(trace, confs, limits.device_memory, budget_bytes=limits.budget_bytes,
                            overhead_bytes=limits.overhead_bytes, jobs=options.jobs,
                            torch_version=target.version, progress=counted("replay"))
    capacities = (min_memory_many(trace, confs, overhead_bytes=limits.overhead_bytes, jobs=options.jobs,
                                  torch_version=target.version,
                                  progress=counted(OptionText("smallest device ({min_memory})")))
                  if options.min_memory else [None] * len(confs))
    return TraceReplay.ranked(name, trace, outcomes, list(capacities), skipped, limits.device_memory,
                              limits.memory_from, limits.budget_bytes,
                              limits.warnings(trace, target))
