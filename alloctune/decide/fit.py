"""A job's memory as a function of one parameter of its command (a batch size, a sequence length), and the largest
value each setting allows under a memory limit: figures and codes, no words.

The curve (`fit`) is a least-squares polynomial of peak bytes in the value: a line, or a parabola where enough points
let a leave-one-out tell the two apart (attention without a fused kernel grows with the square of the sequence
length); the form whose leave-one-out error is smaller is kept, the line on a tie. Beside it: its largest error at
the recorded points and its leave-one-out error (each point predicted from the others), which with few points
tests little (`Fit.loo_weak`).

The largest value (`largest`): memory is taken to grow with the parameter, so a recorded value is decided by its
own replay under the limit, a value between two recorded ones fits when the one above it fits (else the curve
decides), and a value beyond the recorded ones by the curve, up to EXTRAPOLATION times the largest recorded value;
a curve that falls past the largest recorded value (`falls`) contradicts that, and predicts nothing beyond it.
Where the curve decides, its value must fit with the curve's own error on top (`Fit.margin`): on the H200 a
transformers Trainer job's default peaks at batch 8, 16 and 32 lay off a line by up to 10%, its leave-one-out
missed by 36%, and batch 24, which the bare line gave 5.2 GiB of headroom under 42.9 GiB, retried an allocation
there (docs/evidence.md, "What fits"). Each answer says which of the three it rests on (`Basis`). Walking the values
is bounded: at most MAX_VALUES of them (`values_answered`), whatever the recorded values and the step.

An answer is exact (`Largest.exact`) where its value and the next were both recorded: their replays, which equal the
GPU's peaks to the byte, decide both. Where a command can be recorded, the values that would make answers exact are
recorded next (`to_record`: each answer's value and the next one, as the bare curve puts them, since a margin would
only hold the recording back a step below where the curve expects the answer): on an H100 a detection job's curve
carried a 74.7% leave-one-out error, and its margin answered 6 where the GPU ran 8.

Confirmed on the GPU, an answer is checked by running it and the value above it; where the GPU disagrees, a few
more runs (`search_next`, up to SEARCH_RUNS) walk a step at a time to where a run and a failure meet, so that the
answer after the GPU is its own, not the curve's: on the H200 an extrapolated batch the line gave 4.3 GiB of headroom
retried an allocation (the job's sequences grow with its batch), and a batch the margin held back ran.
"""
from __future__ import annotations

import bisect
import enum
import heapq
import math
from collections import Counter
from dataclasses import dataclass
from functools import reduce
from typing import Collection, Iterable, Iterator, Sequence

import numpy as np

QUADRATIC_POINTS = 4      # a parabola is tried from this many points: with fewer, no leave-one-out can test it
STRONG_LOO_POINTS = 5     # a leave-one-out of fewer points predicts each from 1-3 others: it tests little
EXTRAPOLATION = 2.0       # values are predicted up to this times the largest recorded one, and no further
SEARCH_RUNS = 3           # GPU runs past the two that check an answer, to find the largest value where they disagree
MAX_VALUES = 10_000       # the most values an answer walks through (multiples of the step up to the extrapolation)
# A curve lower past the largest recorded value by more than this (relative) falls; less is the allocator's rounding
# (a 2 MiB block of a 100 MiB job is 2%) carried on by a line to twice the value.
FALL = 0.05
EXACT_RECORDINGS = 8      # by default, the most recordings made past the values given, to make answers exact


class Basis(str, enum.Enum):
    """What an answer at a value rests on."""

    REPLAYED = "replayed"           # a recorded value, replayed under the limit
    INTERPOLATED = "interpolated"   # between recorded values, from the curve
    EXTRAPOLATED = "extrapolated"   # beyond the recorded values, from the curve

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Fit:
    """Peak bytes as a polynomial in the value; its error at the recorded points and its leave-one-out error, both
    relative to the recorded figure (None: too few points for a leave-one-out)."""

    coefficients: tuple[float, ...]   # highest power first
    max_error: float
    loo_error: float | None
    points: int
    loo_worst: int | None = None      # the value the leave-one-out missed most (predicted from the others)

    @property
    def degree(self) -> int:
        return len(self.coefficients) - 1

    @property
    def loo_weak(self) -> bool:
        return self.points < STRONG_LOO_POINTS

    def at(self, value: float) -> float:
        return float(np.polyval(np.asarray(self.coefficients), value))

    @property
    def margin(self) -> float:
        """The relative error a value the curve decides is allowed for: how far the curve missed a recorded point
        it was not fitted to (the leave-one-out), else how far it misses the points it was fitted to."""
        return self.loo_error if self.loo_error is not None else self.max_error


def fit(values: Sequence[int], peaks: Sequence[int]) -> Fit:
    """The curve through (value, peak bytes) pairs of distinct values; one point gives a constant."""
    if len(values) != len(peaks) or not values or len(set(values)) != len(values):
        raise ValueError("fit needs as many peaks as values, and distinct values")
    degrees = [0] if len(values) == 1 else [1, 2] if len(values) >= QUADRATIC_POINTS else [1]
    candidates = [_fitted(values, peaks, d) for d in degrees]
    return min(candidates, key=lambda f: (f.loo_error if f.loo_error is not None else 0.0, f.degree))


def _fitted(values: Sequence[int], peaks: Sequence[int], degree: int) -> Fit:
    coefficients = _polyfit(values, peaks, degree)
    errors = [_relative(float(np.polyval(np.asarray(coefficients), v)), p) for v, p in zip(values, peaks)]
    loo, worst = None, None
    if len(values) > degree + 1:
        misses = [_relative(_predicted(values, peaks, i, degree), peaks[i]) for i in range(len(values))]
        loo = max(misses)
        worst = values[misses.index(loo)]
    return Fit(coefficients, max(errors), loo, len(values), worst)


def _predicted(values: Sequence[int], peaks: Sequence[int], left_out: int, degree: int) -> float:
    """Point `left_out` as the curve through the others predicts it."""
    others = [i for i in range(len(values)) if i != left_out]
    coefficients = _polyfit([values[i] for i in others], [peaks[i] for i in others], degree)
    return float(np.polyval(np.asarray(coefficients), values[left_out]))


def _polyfit(values: Sequence[int], peaks: Sequence[int], degree: int) -> tuple[float, ...]:
    return tuple(float(c) for c in np.polyfit(np.asarray(values, float), np.asarray(peaks, float), degree))


def _relative(predicted: float, recorded: float) -> float:
    return abs(predicted - recorded) / recorded if recorded else (0.0 if predicted == 0 else math.inf)


@dataclass(frozen=True)
class Point:
    """A recorded value under one limit: the least room it runs in (replayed) and whether its replay under the limit
    ran without an OOM and without an alloc retry."""

    value: int
    need_bytes: int
    fits: bool


@dataclass(frozen=True)
class Largest:
    """The largest value that fits under a limit, and the value above it (to confirm on the GPU that it does not).
    `value` None: not even the smallest candidate fits. `capped`: it is the last value predicted (EXTRAPOLATION),
    so larger ones may fit too. `next_replayed`: the next value is a recorded one, whose replay does not fit."""

    value: int | None
    basis: Basis | None
    # what `value` needs: the least room it runs in, replayed (`Point`), or the curve's peak without a limit (which
    # the least room equals unless max_split_size_mb or a memory fraction lets a limit hold less)
    need_bytes: int | None
    headroom_bytes: int | None   # what the limit leaves over that need
    next_value: int
    capped: bool
    next_replayed: bool = False

    @property
    def exact(self) -> bool:
        """Both the answer's value (where there is one) and the next are decided by their replays, not the curve."""
        return self.basis in (None, Basis.REPLAYED) and self.next_replayed


def step_of(values: Sequence[int]) -> int:
    """The default spacing of the candidates: the greatest common divisor of the recorded values (8, 16, 32 -> 8)."""
    return reduce(math.gcd, values)


def _top(recorded: Sequence[int], step: int) -> int:
    return int(EXTRAPOLATION * max(recorded)) // step * step


def falls(curve: Fit, recorded: Sequence[int]) -> bool:
    """Whether `curve` falls past the largest recorded value: somewhere up to EXTRAPOLATION times it, lower than
    there by more than FALL. Memory is taken to grow with the value, so such a curve extrapolates nothing: traces of
    different jobs, or a parameter that splits the work (more chunks, less memory), make one."""
    last = max(recorded)
    beyond = np.linspace(last, EXTRAPOLATION * last, 65)
    return bool(np.min(np.polyval(np.asarray(curve.coefficients), beyond)) < curve.at(last) * (1 - FALL))


def values_answered(recorded: Sequence[int], step: int) -> int:
    """How many values an answer may walk through: the multiples of `step` up to the extrapolation, and the
    recorded values (at most MAX_VALUES are answered: a caller refuses more before any work)."""
    return _top(recorded, step) // step + len(recorded)


def _candidates(recorded: Sequence[int], step: int, top: int) -> Iterator[int]:
    """The multiples of `step` up to `top` and the recorded values, in order, each once; lazily, so that a walk
    that stops early never holds them all."""
    last = None
    for value in heapq.merge(range(step, top + 1, step), recorded):
        if value != last:
            yield value
        last = value


def largest(points: Sequence[Point], curve: Fit, capacity: int, step: int, margin: float | None = None) -> Largest:
    """The largest multiple of `step` (or recorded value) that fits in `capacity` bytes of peak reserved, as the
    module says; where the curve decides, a value must fit with `margin` (relative; by default the curve's own,
    `Fit.margin`) on top. A curve that `falls` answers no more than the largest recorded value ('+' where it fits)."""
    points = sorted(points, key=lambda p: p.value)
    recorded = [p.value for p in points]
    allowed = curve.margin if margin is None else margin
    best: tuple[int, Basis, int] | None = None
    for value in _candidates(recorded, step, max(recorded) if falls(curve, recorded) else _top(recorded, step)):
        verdict = _at(value, points, recorded, curve, capacity, allowed)
        if verdict is None:
            return _answer(best, capacity, value, False, value in recorded)
        best = (value, *verdict)
    assert best is not None   # every candidate fitted, so there was one
    return _answer(best, capacity, best[0] + step, True, False)


def _answer(best: tuple[int, Basis, int] | None, capacity: int, next_value: int, capped: bool,
            next_replayed: bool) -> Largest:
    if best is None:
        return Largest(None, None, None, None, next_value, False, next_replayed)
    value, basis, need = best
    return Largest(value, basis, need, capacity - need, next_value, capped, next_replayed)


def _at(value: int, points: list[Point], recorded: list[int], curve: Fit, capacity: int,
        margin: float) -> tuple[Basis, int] | None:
    """(what it rests on, what it needs: `Largest.need_bytes`) at `value` when it fits, else None."""
    i = bisect.bisect_left(recorded, value)
    if i < len(recorded) and recorded[i] == value:
        return (Basis.REPLAYED, points[i].need_bytes) if points[i].fits else None
    need = max(0, round(curve.at(value)))
    fits = need * (1 + margin) <= capacity
    if i == len(recorded):
        return (Basis.EXTRAPOLATED, need) if fits else None
    if points[i].fits:   # the recorded value above fits: so does this one
        return (Basis.INTERPOLATED if i else Basis.EXTRAPOLATED), min(need, points[i].need_bytes)
    return ((Basis.INTERPOLATED if i else Basis.EXTRAPOLATED), need) if fits else None


def to_record(answers: Iterable[Largest], recorded: Collection[int], skip: Collection[int] = ()) -> list[int]:
    """The values whose recordings would make `answers` exact: each inexact answer's value and the next one, where
    not recorded (nor in `skip`); those most answers need first, then the smaller (a shorter run)."""
    need = Counter(v for a in answers if not a.exact for v in (a.value, a.next_value)
                   if v is not None and v not in recorded and v not in skip)
    return sorted(need, key=lambda v: (-need[v], v))


def copies(peak_bytes: int, overhead_bytes: int, memory_bytes: int) -> int:
    """How many processes of a job that runs alone fit at once in `memory_bytes`, each counted at its peak reserved
    without a limit (`peak_bytes`) and its CUDA context, so that no copy's cudaMalloc fails whatever the others keep
    cached: one process cannot take another's cache, so a copy that runs alone in less (its least room, releasing
    cached blocks on a retry) may still fail beside them. At least the one that runs alone; --confirm-copies runs
    the count on the GPU."""
    return max(1, memory_bytes // (peak_bytes + overhead_bytes))


@dataclass(frozen=True)
class Known:
    """What the replays of the recorded values and the GPU's runs of one setting under one limit say together,
    memory taken to grow with the value: the largest value known to run (None: none), with whether the GPU ran it
    (else its replay), and the smallest value the GPU found not to run (None: none)."""

    runs: int | None
    on_gpu: bool
    fails: int | None


def known(replayed: Sequence[tuple[int, bool]], ran: Sequence[tuple[int, bool]]) -> Known:
    """From (recorded value, its replay ran) and (value, it ran on the GPU) pairs; the GPU's word wins where both
    speak, and nothing at or above a value the GPU found not to run counts as running."""
    fails = min((v for v, ok in ran if not ok), default=None)
    said = {**dict(replayed), **dict(ran)}
    running = [v for v, ok in said.items() if ok and (fails is None or v < fails)]
    best = max(running, default=None)
    return Known(best, best is not None and best in dict(ran), fails)


def search_next(ran: Sequence[tuple[int, bool]], step: int) -> int | None:
    """After (value, it ran on the GPU) pairs of one setting under one limit, the value to run next to find the
    largest that runs, `step` apart from the last known: above the largest run where nothing failed, below the
    smallest failure where nothing below it ran; None once a run and a failure are `step` apart or less (or nothing
    lies below), where the GPU has said the answer."""
    k = known([], ran)
    if k.fails is None:
        return max(v for v, _ in ran) + step
    if k.runs is None:
        below = k.fails - step
        return below if below >= 1 else None
    return k.fails - step if k.fails - k.runs > step else None
