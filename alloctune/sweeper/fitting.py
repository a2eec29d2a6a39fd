"""What fits: one job's traces at several values of a parameter, replayed under every setting (sim/points.py) and
fitted (decide/fit.py), answered per setting and limit as the records of fit.json (results/fits.py). No GPU: the
recordings and confirmations on one are `fitrun.py`'s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..decide.fit import Fit, Largest, Point, copies, fit, largest
from ..results.fits import Answer, CurveRecord, FitFile, LimitFit, PointRecord, SettingFit
from ..settings.conf import AllocConf
from ..sim.points import Limit, SettingPoints, overhead_of, recording_device, replay_points
from ..sim.trace import Trace


@dataclass(frozen=True)
class FitRequest:
    """What to answer: the parameter's name, its recorded values' traces (value -> (path, trace)), the settings,
    the cards (bytes) and budgets (as given, and in bytes on the recording GPU), the candidates' spacing, and the
    per-process overhead (None: what the recordings measured)."""

    param: str
    traces: dict[int, tuple[str, Trace]]
    confs: Sequence[AllocConf]
    cards: Sequence[int]
    budgets: Sequence[tuple[str, int]]
    step: int
    overhead_bytes: int | None = None
    command: list[str] | None = None


def limits_of(request: FitRequest) -> list[tuple[Limit, str | None]]:
    """The limits answered, each with its budget as given (None for a card): the cards, then the budgets."""
    device = recording_device([t for _, t in request.traces.values()])
    return [(Limit(card), None) for card in request.cards] + \
        [(Limit(device, budget), text) for text, budget in request.budgets]


def fit_traces(request: FitRequest, jobs: int | None = None) -> FitFile:
    """The whole answer, as fit.json holds it."""
    values = sorted(request.traces)
    traces = [request.traces[v][1] for v in values]
    measured = any(t.meta.get("overhead_bytes") is not None for t in traces)
    overhead = request.overhead_bytes if request.overhead_bytes is not None else overhead_of(traces)
    limits = limits_of(request)
    replayed = replay_points({v: request.traces[v][1] for v in values}, request.confs, [lim for lim, _ in limits],
                             overhead_bytes=overhead, jobs=jobs)
    curves = {id(s): _curves(s) for s in replayed}
    limit_fits = []
    for i, (limit, text) in enumerate(limits):
        capacity = limit.capacity(overhead)
        answers = [_answer(s, curves[id(s)][0], i, capacity, request.step, overhead)
                   for s in replayed if s.reason is None]
        limit_fits.append(LimitFit(limit.device_bytes, capacity, answers, text, limit.budget_bytes))
    warnings = list(dict.fromkeys(w for t in traces for w in t.warnings))
    return FitFile(request.param, values, request.step, [request.traces[v][0] for v in values], overhead,
                   measured and request.overhead_bytes is None, recording_device(traces),
                   [_setting_fit(s, *curves[id(s)]) for s in replayed], limit_fits, request.command, warnings)


def _curves(s: SettingPoints) -> tuple[Fit | None, Fit | None]:
    if s.reason is not None:
        return None, None
    values = [p.value for p in s.points]
    return (fit(values, [p.peak_reserved_bytes for p in s.points]),
            fit(values, [p.peak_allocated_bytes for p in s.points]))


def _curve_record(curve: Fit | None) -> CurveRecord | None:
    if curve is None:
        return None
    return CurveRecord(list(curve.coefficients), curve.max_error, curve.loo_error, curve.points, curve.loo_weak)


def _setting_fit(s: SettingPoints, reserved: Fit | None, allocated: Fit | None) -> SettingFit:
    points = [PointRecord(p.value, p.peak_reserved_bytes, p.peak_allocated_bytes) for p in s.points]
    return SettingFit(str(s.setting), points, _curve_record(reserved), _curve_record(allocated), s.reason)


def _answer(s: SettingPoints, curve: Fit | None, limit: int, capacity: int, step: int, overhead: int) -> Answer:
    """One setting under the limit of index `limit`. Copies at once share what the limit gives one process: its
    room for the allocator and its context (a card's memory; a budget and one context)."""
    assert curve is not None
    points = [Point(p.value, p.need_under(limit), p.runs[limit]) for p in s.points]
    best: Largest = largest(points, curve, capacity, step)
    return Answer(str(s.setting), best.value, None if best.basis is None else best.basis.value, best.need_bytes,
                  best.headroom_bytes, best.next_value, best.capped, [p.fits for p in points],
                  [copies(p.need_bytes, overhead, capacity + overhead) if p.fits else 0 for p in points])
