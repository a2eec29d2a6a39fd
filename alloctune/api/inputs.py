"""What the use cases that replay traces read (replay, search, fit, fleet): a trace given as a path or as a loaded
`Trace` (`TraceInput`), and the device a replay runs on: its memory (the caller's, else the recording GPU's, else
sim/limits.py's default), a budget on it and the overhead outside the allocator, with the warnings a user must read
about them. The words name options as `OptionText` (`{device_memory}`), which the CLI shows as its flags."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Union

from ..errors import OptionError, OptionText, SizeError, shown
from ..results.provenance import provenance
from ..sim.limits import DEFAULT_DEVICE_MEMORY
from ..sim.rebuilt import allowed_at_oom
from ..sim.target import Target
from ..sim.trace import Trace, load_trace
from ..units import budget_on, format_bytes, parse_budget
from .checks import grid_file, one_stdin, path, set_field, settings

# A trace as the use cases take it: its path ('-' for standard input) or the Trace `alloctune.load_trace` returns.
TraceInput = Union[str, os.PathLike, Trace]

ASSUMED_MEMORY = "assumed: an H200's"   # `DeviceLimits.memory_from` when neither the caller nor the trace says
AT_OOM = "what the snapshot says the process could have"   # `DeviceLimits.budget_from`: `rebuilt.allowed_at_oom`


def card_words(measured: bool) -> str:
    """The card a trace's memory is of, in words: the GPU it was recorded on, or the card its dry run stands for."""
    return "the recording GPU" if measured else "the card the dry run stands for"


def trace_inputs(value: object, field: str = "traces") -> tuple[str | Trace, ...]:
    """One trace or a sequence of them, each a Trace or a checked path (as text)."""
    items = [value] if isinstance(value, (str, os.PathLike, Trace)) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise OptionError(field, "{%s}: expected a trace's path, a Trace (alloctune.load_trace), or a non-empty "
                          "list of them, got {got}" % field, got=shown(value))
    return tuple(item if isinstance(item, Trace) else path(item, field) for item in items)


def held(traces: object) -> tuple[str | Trace, ...]:
    """Traces as options hold them once checked (`trace_inputs`)."""
    assert isinstance(traces, tuple)
    return traces


def name_of(source: TraceInput, index: int) -> str:
    """How a trace is named in the results: its path, or 'trace #N' for a Trace given loaded."""
    return f"trace #{index + 1}" if isinstance(source, Trace) else os.fspath(source)


def given_twice(sources: tuple[str | Trace, ...]) -> tuple[str, str] | None:
    """Two of `sources` that are one trace (the same Trace, or paths to one file however spelt: ./a.xz and a.xz,
    a link and its target), the first such pair; None where each is given once."""
    seen: dict[object, str] = {}
    for index, source in enumerate(sources):
        name = name_of(source, index)
        if isinstance(source, Trace):
            key: object = id(source)
        elif source == "-":
            continue   # standard input: once at most, `checks.one_stdin`'s rule
        else:
            try:
                found = os.stat(source)
                key = (found.st_dev, found.st_ino)
            except (OSError, ValueError):   # not there (yet): its load names it; the path itself, resolved
                key = os.path.realpath(source)
        if key in seen:
            return seen[key], name
        seen[key] = name
    return None


def once_each(sources: tuple[str | Trace, ...], each: str, why: str) -> None:
    """Refused in one line (on the option `traces`) where two of `sources` are one trace (`given_twice`): each
    `each` (a job, a value) takes its own trace, and `why` says what one given twice would do."""
    if twice := given_twice(sources):
        raise OptionError("traces", "each %s's trace once: {first} and {second} are one trace, %s" % (each, why),
                          first=twice[0], second=twice[1])


def loaded(source: TraceInput, device: int | None = None) -> Trace:
    return source if isinstance(source, Trace) else load_trace(source, device=device)


def budget_limit(value: object) -> tuple[int | None, float | None] | None:
    """A budget option: a size ('24GiB', bytes) or a fraction of the device (0.5, '0.5'); None: none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise OptionError("budget", "{budget}: expected a size such as '24GiB' or a fraction such as 0.5, got {got}",
                          got=shown(value))
    try:
        return parse_budget(str(value))
    except SizeError as exc:
        raise OptionError("budget", "{budget}: {why}", why=str(exc)) from None


@dataclass(frozen=True)
class DeviceLimits:
    """The device a trace is replayed on, resolved: its memory, where that came from (in words; an OptionText when
    it is the caller's option), the budget in bytes on it (None: none), where a budget the caller did not give came
    from (in words) and the overhead (None: what the trace recorded, else sim/limits.py's default)."""

    device_memory: int
    memory_from: str
    budget_bytes: int | None
    overhead_bytes: int | None
    budget_from: str | None = None

    @classmethod
    def of(cls, trace: Trace, device_memory: int | None, budget: tuple[int | None, float | None] | None,
           overhead_bytes: int | None) -> "DeviceLimits":
        """A snapshot taken at an OOM, given neither a budget nor a device memory, is replayed under what it says
        the process could have (as `diagnose` judges it), where it says so: every replaying command agrees."""
        where: str
        if device_memory is not None:
            memory, where = device_memory, OptionText("{device_memory}")
        elif trace.meta.get("device_total_bytes"):
            measured = provenance(trace.meta).measured
            memory = int(trace.meta["device_total_bytes"])
            where = card_words(measured)
        else:
            memory, where = DEFAULT_DEVICE_MEMORY, ASSUMED_MEMORY
        if budget is None and device_memory is None and (allowed := allowed_at_oom(trace.meta)) is not None:
            return cls(memory, where, allowed, overhead_bytes, AT_OOM)
        return cls(memory, where, budget_on(*budget, memory) if budget else None, overhead_bytes)

    def warnings(self, trace: Trace, target: Target) -> list[str]:
        """What a replay or search of `trace` rests on that the user must know: the trace's own warnings (frees of
        blocks allocated before the recording started, ...), what a dry run could not size, the torch whose
        allocator was simulated (`Target.warnings`), an assumed device memory, a budget the caller did not give (an
        OOM snapshot's, `budget_from`) and a budget the device cannot hold. The text output prints them as `warning:`
        lines and JSON lists them under "warnings" (fleet's each said of its job)."""
        from ..report.provenance import workspace_warning

        warnings: list[str] = list(trace.warnings)
        if unsized := workspace_warning(provenance(trace.meta)):
            warnings.append(unsized)
        warnings += target.warnings()
        if self.memory_from == ASSUMED_MEMORY:
            warnings.append(OptionText("the trace does not say how much memory its GPU had: replayed on an H200's "
                                       "{memory}; set {device_memory} for another card",
                                       memory=format_bytes(DEFAULT_DEVICE_MEMORY)))
        if self.budget_from:   # a budget the caller did not give
            warnings.append(OptionText("replayed under a budget of {size}, %s; {budget} sets another"
                                       % self.budget_from, size=format_bytes(self.budget_bytes or 0)))
        if self.budget_bytes is not None and self.budget_bytes > self.device_memory:
            where = "{device_memory}" if isinstance(self.memory_from, OptionText) else "{where}"
            warnings.append(OptionText("{budget} {size} is more than the device's {card} (%s): the device runs "
                                       "out first, so the budget limits nothing; give {device_memory} for a larger "
                                       "card" % where, size=format_bytes(self.budget_bytes),
                                       card=format_bytes(self.device_memory), where=self.memory_from))
        return warnings


def check_traces_and_grid(options) -> None:
    """A replaying use case's `traces`, `confs` and `grid` fields checked in place (replay's and fleet's options):
    the traces as inputs, the settings parsed, the grid a file's path (`grid_file`), at most one of them standard
    input."""
    set_field(options, "traces", trace_inputs(options.traces))
    set_field(options, "confs", settings(options.confs))
    if options.grid is not None:
        set_field(options, "grid", grid_file(options.grid))
    one_stdin([*held(options.traces), options.grid], "traces", "the traces and {grid}")
