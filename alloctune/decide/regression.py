"""compare's judgement (pure): one setting's trials in one environment reduced to a `Cell`, and a cell judged
against the baseline cell of its row as a `Delta`: a `Mark` and the figures it rests on, with what qualifies it
as a code (`Why`). report/compare.py groups folders into rows and columns and says the codes in words.

  incomparable          a side has no trials, or the workload definition (hash) differs, or both fit under
                        different memory budgets (their peaks answer different questions)
  new failure           fits in the baseline, OOM / crash / time-out in this column
  fixed failure         the reverse;  "fails in both" when neither fits. Also judged across different budgets:
                        "fits in 24 GiB but not in 16 GiB" is what a budget comparison asks
  regression            peak reserved up by more than `factor`, or throughput significantly lower by more than
                        `factor` (one-sided Welch test on log throughput, `stats.compare`)
  improvement           peak reserved down by more than `factor`, or throughput significantly higher by more
                        than `factor`, and no regression
  change within factor  neither, but throughput differs significantly (by less than `factor`)
  no significant change memory within `factor` and throughput within noise (or too few repeats to tell)

Throughput is compared only where both sides measured it the same way: the same unit and the same source
(`measured_by`: a timed pass, step marks, the whole run's wall time, ...; a record that does not say counts as a
method of its own, never as any other); else the mark rests on memory alone and says why (`Why.METHOD_DIFFERS`).
A mark that rests on memory alone, for that or because a side has no throughput (a replay), says so
(`Delta.memory_alone`).
"""
from __future__ import annotations

import enum
import statistics
from collections import Counter
from dataclasses import dataclass

from ..results.records import Measurement, ThroughputSource, TrialRecord
from ..units import budget_on
from . import stats
from .device import device_memory, takes_whole_card

DEFAULT_FACTOR = 0.05   # a relative change of memory or throughput beyond this counts as changed


class Mark(str, enum.Enum):
    BASELINE = "baseline"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    WITHIN_FACTOR = "change within factor"
    SAME = "no significant change"
    NEW_FAILURE = "new failure"
    FIXED_FAILURE = "fixed failure"
    BOTH_FAIL = "fails in both"
    INCOMPARABLE = "incomparable"


class Why(str, enum.Enum):
    """What qualifies a mark; its figures are the two cells' own (and `Delta.budgets`)."""

    MISSING = "missing"                    # a side has no trials (the row says why)
    WORKLOAD_DIFFERS = "workload differs"  # the two workload hashes
    FAILED = "failed"                      # the side(s) that failed: their commonest state and count
    BUDGET_DIFFERS = "budget differs"      # both fit, under different budgets
    UNTESTED = "untested"                  # throughput on both sides, too few repeats to test it
    METHOD_DIFFERS = "method differs"      # throughput on both sides, measured differently: not compared


@dataclass(frozen=True)
class Cell:
    """The trials of one setting in one environment."""

    trials: int
    failure: str | None               # the commonest non-OK state when any trial did not end OK, else None
    failed: int                       # how many trials did not end OK
    workload_hash: str
    budget_bytes: int | None          # `budget_of`
    peak_reserved_bytes: float | None  # medians over the OK trials
    reserved_ratio: float | None      # peak reserved / peak allocated
    throughput: stats.Summary | None
    samples: tuple[float, ...] = ()   # throughput of each OK trial
    unit: str | None = None
    device_bytes: int | None = None   # the memory of the device it ran on (a replay's: the simulated one's)
    source: str | None = None         # how its throughput was taken: the commonest `measured_by`

    def measured_like(self, other: "Cell") -> bool:
        """Its throughput and `other`'s were measured the same way: the same source (an unknown one alike only to
        another unknown one: records of the same age) and unit (a side that does not say its unit counts as alike)."""
        return (self.unit == other.unit or None in (self.unit, other.unit)) and self.source == other.source

    @property
    def fits(self) -> bool:
        return self.failure is None

    @property
    def whole_card(self) -> bool:
        """It fits, but took (nearly) all of the device's memory (device.takes_whole_card)."""
        return self.fits and takes_whole_card(self.peak_reserved_bytes, self.device_bytes)


@dataclass(frozen=True)
class Delta:
    """A cell judged against the baseline cell of its row."""

    mark: Mark
    reserved: float | None = None     # peak reserved: this / baseline - 1
    throughput: float | None = None   # throughput median: this / baseline - 1
    p_value: float | None = None      # two-sided Welch test on log throughput
    why: Why | None = None
    budgets: tuple[int | None, int | None] | None = None   # (baseline, this) where they differ

    @property
    def memory_alone(self) -> bool:
        """Both fit and the mark rests on memory alone: throughput was not compared (a side has none, or they
        measured it differently)."""
        return self.mark in (Mark.REGRESSION, Mark.IMPROVEMENT, Mark.SAME) and self.throughput is None


def measured_by(m: Measurement) -> str | None:
    """How `m`'s throughput was taken (a ThroughputSource value), as its record says or implies; None where it does
    neither. A workload trial records no source: since 2026-11-30 its throughput is a second, timed pass over the
    measured steps, the first pass kept as `warm_throughput`; a record without that timed the first pass itself
    (child/main.py before the steady pass), a command's record from before 2026-12-01 its marks, printed numbers
    or wall time: None, a method unlike any named."""
    if m.throughput_source is not None:
        return m.throughput_source.value
    return ThroughputSource.TIMED_PASS.value if m.warm_throughput is not None else None


def budget_of(records: list[TrialRecord], fraction: float | None = None) -> int | None:
    """The memory budget `records` ran under, in bytes: their own figure (a size given; a replay's, which holds
    a fraction of its simulated card in bytes), else the sweep's budget `fraction` (which measured trials keep as
    a fraction) of the device they ran on; None without a budget, or where the device is unknown."""
    device = device_memory(records)
    given = records[0].budget_bytes
    return given if given is not None or fraction is None or device is None else budget_on(None, fraction, device)


def cell_of(records: list[TrialRecord], budget_fraction: float | None = None) -> Cell:
    """The cell of `records` (one setting in one environment); `budget_fraction`: their sweep's (`budget_of`)."""
    ms = [r.measurement for r in records if r.state.fits and r.measurement is not None]
    bad = Counter(r.state.value for r in records if not (r.state.fits and r.measurement is not None))
    samples = tuple(m.throughput for m in ms if m.throughput is not None)
    ratios = [m.reserved_ratio for m in ms if m.reserved_ratio is not None]
    sources = Counter(measured_by(m) for m in ms if m.throughput is not None)
    return Cell(
        trials=len(records),
        failure=bad.most_common(1)[0][0] if bad else None,
        failed=sum(bad.values()),
        workload_hash=records[0].workload_hash,
        budget_bytes=budget_of(records, budget_fraction),
        peak_reserved_bytes=statistics.median(m.peak_reserved_bytes for m in ms) if ms else None,
        reserved_ratio=statistics.median(ratios) if ratios else None,
        throughput=stats.summarize(list(samples)) if samples else None,
        samples=samples,
        unit=next((m.unit for m in ms if m.unit), None),
        device_bytes=device_memory(records),
        source=sources.most_common(1)[0][0] if sources else None,
    )


def judge(a: Cell | None, b: Cell | None, factor: float = DEFAULT_FACTOR) -> Delta:
    """Cell `b` against the baseline cell `a` of its row (None: that side has no trials)."""
    if a is None or b is None:
        return Delta(Mark.INCOMPARABLE, why=Why.MISSING)
    if a.workload_hash != b.workload_hash:
        return Delta(Mark.INCOMPARABLE, why=Why.WORKLOAD_DIFFERS)
    budgets = None if a.budget_bytes == b.budget_bytes else (a.budget_bytes, b.budget_bytes)
    if not (a.fits and b.fits):
        mark = Mark.BOTH_FAIL if not a.fits and not b.fits else Mark.NEW_FAILURE if a.fits else Mark.FIXED_FAILURE
        return Delta(mark, why=Why.FAILED, budgets=budgets)
    if budgets:
        return Delta(Mark.INCOMPARABLE, why=Why.BUDGET_DIFFERS, budgets=budgets)
    reserved = (b.peak_reserved_bytes / a.peak_reserved_bytes - 1
                if a.peak_reserved_bytes and b.peak_reserved_bytes is not None else None)
    slower = faster = significant = False
    throughput = p_value = None
    alike = a.measured_like(b)
    if a.samples and b.samples and alike:
        test = stats.compare(list(a.samples), list(b.samples), tolerance=factor)
        # The same one-sided test with the sides swapped: is the baseline slower than (1 - factor) x this one?
        faster = stats.compare(list(b.samples), list(a.samples), tolerance=factor).slower_beyond_tolerance
        slower, significant = test.slower_beyond_tolerance, test.significant
        throughput, p_value = test.ratio - 1, test.p_value
    why = (Why.METHOD_DIFFERS if a.samples and b.samples and not alike
           else None if p_value is not None or throughput is None else Why.UNTESTED)
    if (reserved or 0) > factor or slower:
        mark = Mark.REGRESSION
    elif (reserved or 0) < -factor or faster:
        mark = Mark.IMPROVEMENT
    elif significant:
        mark = Mark.WITHIN_FACTOR
    else:
        mark = Mark.SAME
    return Delta(mark, reserved, throughput, p_value, why)
