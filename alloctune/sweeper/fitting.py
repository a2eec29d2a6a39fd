"""What fits: one job's traces at several values of a parameter, replayed under every setting (sim/points.py) and
fitted (decide/fit.py), answered per setting and limit as the records of fit.json (results/fits.py). No GPU: the
recordings and confirmations on one are `fitrun.py`'s, the recordings that make answers exact `fitexact.py`'s.

Traces are held one at a time: each is loaded to be replayed and dropped after, keeping only its metadata
(`TraceFacts`); a trace given loaded (the Python API, or standard input, which reads once) stays the caller's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

from ..decide.fit import Fit, Largest, Point, copies, falls, fit, largest
from ..errors import shown
from ..results.fits import (UNTESTED, Answer, CurveRecord, ExactRecord, FitFile, LimitFit, OverheadFrom, PointRecord,
                            SettingFit, answer_basis)
from ..results.provenance import DryRunSaid, jointly, provenance
from ..settings.conf import AllocConf
from ..sim.points import Limit, Replayed, SettingPoints, points_of, replay_value
from ..sim.trace import Trace, load_trace
from ..units import format_bytes

TraceSource = Union[str, Trace]   # a trace's path, or the trace itself


@dataclass(frozen=True)
class TraceFacts:
    """What a fit keeps of a trace once its events are dropped: its metadata (the recording GPU's memory, the
    context measured, the torch it ran, whether it is a dry run's, the command line it ran) and its warnings."""

    meta: Mapping[str, Any]
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, trace: Trace) -> "TraceFacts":
        keys = ("overhead_bytes", "device_total_bytes", "torch_version", "dry_run", "command")
        return cls({k: trace.meta[k] for k in keys if k in trace.meta}, tuple(trace.warnings))


def load_source(source: TraceSource, device: int | None = None) -> Trace:
    """`source` read (`device`: which GPU's, where a snapshot has several), or the trace given."""
    return source if isinstance(source, Trace) else load_trace(source, device=device)


@dataclass(frozen=True)
class FitRequest:
    """What to answer: the parameter's name, the settings, the cards (bytes) and budgets (as given, and in bytes
    on the recording GPU), the candidates' spacing, the per-process overhead (bytes, and where it came from) and the
    recording GPU's memory; the command, where one was recorded; and what the fit warns of before any replay (the
    settings the grid's rules skipped, traces of different commands)."""

    param: str
    confs: Sequence[AllocConf]
    cards: Sequence[int]
    budgets: Sequence[tuple[str, int]]
    step: int
    overhead_bytes: int
    overhead_from: OverheadFrom
    device_bytes: int
    command: list[str] | None = None
    warnings: Sequence[str] = ()

    def limits(self) -> list[tuple[Limit, str | None]]:
        """The limits answered, each with its budget as given (None for a card): the cards, then the budgets."""
        return [(Limit(card), None) for card in self.cards] + \
            [(Limit(self.device_bytes, budget), text) for text, budget in self.budgets]


class Replays:
    """The traces a fit rests on, added a value at a time, each replayed under every setting without a limit, under
    each of the request's limits and for its least room as it is added (and then dropped)."""

    def __init__(self, request: FitRequest, jobs: int | None = None, device: int | None = None):
        self.request = request
        self.jobs = jobs
        self.device = device
        self.names: dict[int, str] = {}
        self.facts: dict[int, TraceFacts] = {}
        self._by_value: dict[int, list[Replayed | str]] = {}

    def add(self, value: int, name: str, source: TraceSource) -> None:
        trace = load_source(source, self.device)
        self.facts[value] = TraceFacts.of(trace)
        self._by_value[value] = replay_value(trace, self.request.confs, [lim for lim, _ in self.request.limits()],
                                             value=value, overhead_bytes=self.request.overhead_bytes, jobs=self.jobs)
        self.names[value] = name

    @property
    def values(self) -> list[int]:
        return sorted(self._by_value)

    def points(self) -> list[SettingPoints]:
        return points_of(self._by_value, self.request.confs)


def estimates(replays: Replays) -> list[Largest]:
    """Every simulated setting's answer under every limit as the bare curve gives it (no margin): where the values
    that settle an answer are expected."""
    request = replays.request
    out = []
    for s in replays.points():
        if s.reason is None:
            curve = _curves(s)[0]
            assert curve is not None
            rooms = [limit.capacity(request.overhead_bytes) for limit, _ in request.limits()]
            out += [largest(_points(s, i, room), curve, room, request.step, margin=0.0) for i, room in enumerate(rooms)]
    return out


def recording_curve(replays: Replays) -> Fit | None:
    """What the tensors of a recording need at once at each value, as a curve (the peak allocated of the setting it
    runs under, the default, where it was replayed; else of the setting that needs least): with less room no setting
    runs it. Not its peak reserved: given less room the allocator frees its cache and goes on, so the recording runs
    (on an H100 that curve put Mask R-CNN's batch 12 beyond the card, which ran it, and 14, in a 53 GiB budget). A
    value between the two may still fail to record; that failure is kept and costs one recording."""
    curves = {s.setting: curve for s in replays.points() if (curve := _curves(s)[1]) is not None}
    if AllocConf() in curves:
        return curves[AllocConf()]
    return min(curves.values(), key=lambda c: c.at(max(replays.values)), default=None)


def fit_file(replays: Replays, exact: ExactRecord | None = None) -> FitFile:
    """The whole answer, as fit.json holds it: where the curve decides, its value must fit with its margin on top."""
    request = replays.request
    values = replays.values
    replayed = replays.points()
    curves = {id(s): _curves(s) for s in replayed}
    limit_fits = []
    for i, (limit, text) in enumerate(request.limits()):
        capacity = limit.capacity(request.overhead_bytes)
        answers = [_answer(s, curves[id(s)][0], i, capacity, request.step, request.overhead_bytes)
                   for s in replayed if s.reason is None]
        limit_fits.append(LimitFit(limit.device_bytes, capacity, answers, text, limit.budget_bytes))
    warnings = list(dict.fromkeys([*request.warnings, *(w for v in values for w in replays.facts[v].warnings),
                                   *_falling(replayed, curves, request.param)]))
    return FitFile(request.param, values, request.step, [replays.names[v] for v in values], request.overhead_bytes,
                   request.overhead_from, request.device_bytes,
                   [_setting_fit(s, *curves[id(s)]) for s in replayed], limit_fits, request.command, warnings, exact,
                   dry_run_of([replays.facts[v] for v in values]))


def _falling(replayed: list[SettingPoints], curves: dict, param: str) -> list[str]:
    """The settings whose curve of peak reserved falls past the largest value (decide/fit.falls), in a line."""
    fell = [s for s in replayed if s.reason is None and falls(curves[id(s)][0], [p.value for p in s.points])]
    if not fell:
        return []
    first, last = fell[0].points[0], fell[0].points[-1]
    more = f" and {len(fell) - 1} more" if len(fell) > 1 else ""
    return [f"the curve of {fell[0].setting.label}{more} falls past {param} {last.value} (peak reserved "
            f"{format_bytes(first.peak_reserved_bytes)} at {first.value}, {format_bytes(last.peak_reserved_bytes)} "
            f"at {last.value}): memory is taken to grow with {param}, so no answer goes past {last.value}; are the "
            f"traces one job's?"]


def command_warning(facts: Mapping[int, TraceFacts], param: str) -> str | None:
    """Where the traces say they ran command lines that differ other than in the value, a line that says which;
    None where they agree or do not say."""
    said = [(v, c) for v, f in sorted(facts.items()) if isinstance(c := f.meta.get("command"), list)]
    other = next((c for c in said[1:] if not _alike(said[0], c)), None)
    if other is None:
        return None
    ran = "; ".join(f"{param} {v}: {shown(' '.join(map(str, c)), 60)}" for v, c in (said[0], other))
    return f"the traces ran different commands ({ran}): a fit joins one job's traces at several values of {param}"


def _alike(a: tuple[int, list], b: tuple[int, list]) -> bool:
    """Two command lines, each with the value it ran at, alike but for the value."""
    return len(a[1]) == len(b[1]) and all(x == y or ((m := _marked(x, a[0])) is not None and m == _marked(y, b[0]))
                                          for x, y in zip(a[1], b[1]))


def _marked(word: object, value: int) -> str | None:
    """A word that holds the value as a number of its own ('8', '--batch=8', 'run-8.log') with a mark for it; None
    for a word that does not."""
    marked, n = re.subn(rf"(?<![0-9]){value}(?![0-9])", "{}", str(word))
    return marked if n else None


def dry_run_of(facts: Sequence[TraceFacts]) -> DryRunSaid | None:
    """Whether the traces are dry runs, and for which card (results/provenance.jointly; a mix refused: ValueError)."""
    return jointly([provenance(f.meta) for f in facts])


def _curves(s: SettingPoints) -> tuple[Fit | None, Fit | None]:
    if s.reason is not None:
        return None, None
    values = [p.value for p in s.points]
    return (fit(values, [p.peak_reserved_bytes for p in s.points]),
            fit(values, [p.peak_allocated_bytes for p in s.points]))


def _curve_record(curve: Fit | None) -> CurveRecord | None:
    if curve is None:
        return None
    return CurveRecord(list(curve.coefficients), curve.max_error, curve.loo_error, curve.points, curve.loo_weak,
                       curve.loo_worst)


def _setting_fit(s: SettingPoints, reserved: Fit | None, allocated: Fit | None) -> SettingFit:
    points = [PointRecord(p.value, p.peak_reserved_bytes, p.peak_allocated_bytes, p.least_room_bytes)
              for p in s.points]
    return SettingFit(str(s.setting), points, _curve_record(reserved), _curve_record(allocated), s.reason)


def _points(s: SettingPoints, limit: int, capacity: int) -> list[Point]:
    """Each recorded value under the limit of index `limit` (`capacity` bytes of room): whether its replay there runs,
    and the least room it runs in; a replay that ran in the limit's room ran in no more than it, whatever the least
    room's search found (to its granularity, or past a size where more memory did worse)."""
    points = []
    for p in s.points:
        # None found (no room up to the search's end) and no run under the limit: the peak without one is all known
        rooms = [r for r in (p.least_room_bytes, capacity if p.runs[limit] else None) if r is not None]
        points.append(Point(p.value, min(rooms, default=p.peak_reserved_bytes), p.runs[limit]))
    return points


def _answer(s: SettingPoints, curve: Fit | None, limit: int, capacity: int, step: int, overhead: int) -> Answer:
    """One setting under the limit of index `limit`. Copies at once share what the limit gives one process: its
    room for the allocator and its context (a card's memory; a budget and one context), each counted at its peak
    without a limit (`decide/fit.copies`)."""
    assert curve is not None
    points = _points(s, limit, capacity)
    best: Largest = largest(points, curve, capacity, step)
    basis, part = answer_basis(None if best.basis is None else best.basis.value, best.exact)
    untested = not best.exact and curve.loo_error is None   # two values: a line meets both, nothing tested it
    return Answer(str(s.setting), best.value, basis, best.need_bytes, best.headroom_bytes, best.next_value,
                  best.capped, [p.fits for p in points],
                  [copies(r.peak_reserved_bytes, overhead, capacity + overhead) if p.fits else 0
                   for p, r in zip(points, s.points)],
                  best.exact, None if best.exact or untested else curve.margin, part, UNTESTED if untested else None)
