"""search: the settings space of a target torch searched by replaying one trace, and the Pareto front of peak
reserved against release-and-retry rounds and keys set (sim/search.py does the search). `alloctune search` and
`alloctune.search()`."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError, shown
from ..results.provenance import Provenance, provenance
from ..sim import search as searching
from ..settings.validation import Validator
from ..sim.limits import DEFAULT_MAX_SETTINGS
from ..sim.target import Target
from ..sim.trace import Trace
from .checks import count, device_index, given, in_bytes, path, set_field, size, workers
from .inputs import DeviceLimits, TraceInput, budget_limit, loaded, name_of, trace_inputs
from .options import options_of


@dataclass(frozen=True)
class SearchOptions:
    """What to search, for which torch, on what device. Sizes are bytes or strings such as '24GiB'."""

    trace: TraceInput | None = None
    python: str | os.PathLike | None = None      # the interpreter that will run the job (default: the trace's torch)
    max_settings: int = DEFAULT_MAX_SETTINGS      # most settings replayed
    device_memory: int | str | None = None       # default: the recording GPU's, else sim/limits.py's
    budget: str | int | float | None = None      # a size or a fraction of the device; adds the budget keys
    overhead: int | str | None = None            # outside the allocator (default: what the trace recorded, else 1GiB)
    device: int | None = None                    # which device's trace, when a snapshot has several
    jobs: int | None = None                      # worker processes (default: every usable core)

    def __post_init__(self) -> None:
        if isinstance(self.trace, (list, tuple)):
            raise OptionError("trace", "{trace}: one trace (a path or a Trace), got {got}", got=shown(self.trace))
        set_field(self, "trace", trace_inputs(self.trace, "trace")[0])
        if self.python is not None:
            set_field(self, "python", path(self.python, "python"))
        count(self.max_settings, "max_settings")
        for name, least in (("device_memory", 1), ("overhead", 0)):
            if getattr(self, name) is not None:
                set_field(self, name, size(getattr(self, name), name, least))
        budget_limit(self.budget)
        device_index(self.device)
        workers(self.jobs)


@dataclass(frozen=True)
class SearchResult:
    """The search (`sim.search.SearchResult`: what was replayed, the front with each member's reason, what torch
    or the rules refused), what it rests on that the user must know, and where the trace came from."""

    search: searching.SearchResult
    warnings: tuple[str, ...] = ()
    provenance: Provenance = Provenance()   # the trace's: measured on a GPU, or a dry run for a card

    @property
    def front(self) -> list[searching.FrontMember]:
        return self.search.front

    def to_json(self) -> dict:
        return dict(self.search.to_json(), dry_run=self.provenance.to_json(), warnings=list(self.warnings))


def search(trace: TraceInput | None = None, options: SearchOptions | None = None, *,
           progress: searching.ProgressFn | None = None, **fields: Any) -> SearchResult:
    """Search the settings space of the trace's torch (of `python`'s, where given) on `trace` (a path or a Trace);
    `options` (SearchOptions) or its fields as keywords: `search("a.xz", max_settings=100, budget="24GiB")`.
    `progress(replayed, budget, best)` is called after every batch of replays."""
    from ..trial.probe import SettingsJudge

    options = options_of("search", SearchOptions, options, given(fields, trace=trace))
    source = options.trace
    assert source is not None   # SearchOptions' rule
    loaded_trace = loaded(source, options.device)
    limits = DeviceLimits.of(loaded_trace, in_bytes(options.device_memory), budget_limit(options.budget),
                             in_bytes(options.overhead))
    with SettingsJudge(os.fspath(options.python or sys.executable)) as judge:   # one child judges every batch
        target, validate = _judged_as(loaded_trace, options.python, judge, judge.hello()["torch_version"])
        result = searching.search(loaded_trace, validate=validate, trace_name=name_of(source, 0),
                                  device_memory=limits.device_memory, budget_bytes=limits.budget_bytes,
                                  overhead_bytes=limits.overhead_bytes, max_settings=options.max_settings,
                                  jobs=options.jobs, progress=progress)
    return SearchResult(result, tuple(limits.warnings(loaded_trace, target)), provenance(loaded_trace.meta))


def _judged_as(trace: Trace, python: str | os.PathLike | None, judge: Validator,
               here: str) -> tuple[Target, Validator]:
    """The torch searched (`sim/target.py`'s rule: the trace's, unless --python names the one that will run the
    job) and who judges its settings (`Target.judge`: `judge`, the interpreter's own torch `here`, or the version
    table)."""
    target = Target(trace.meta.get("torch_version"), here if python is not None else None, "python")
    return target, target.judge(here, judge)
