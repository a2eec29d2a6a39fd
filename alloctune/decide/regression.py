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

Throughput is compared only where both sides measured it the same way: the same unit and, where both records say
it, the same source (`Measurement.throughput_source`: a timed pass, step marks, the whole run's wall time, ...);
else the mark rests on memory alone and says why (`Why.METHOD_DIFFERS`).
"""
from __future__ import annotations

import enum
import statistics
from collections import Counter
from dataclasses import dataclass

from ..results.records import TrialRecord
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
    budget_bytes: int | None
    peak_reserved: float | None       # medians over the OK trials
    ratio: float | None               # peak reserved / peak allocated
    throughput: stats.Summary | None
    samples: tuple[float, ...] = ()   # throughput of each OK trial
    unit: str | None = None
    device_bytes: int | None = None   # the memory of the device it ran on (a replay's: the simulated one's)
    source: str | None = None         # where its throughput came from (the commonest ThroughputSource value)

    def measured_like(self, other: "Cell") -> bool:
        """Its throughput and `other`'s were measured the same way (a side that does not say counts as alike)."""
        return (self.unit == other.unit or None in (self.unit, other.unit)) and (
            self.source == other.source or None in (self.source, other.source))

    @property
    def fits(self) -> bool:
        return self.failure is None

    @property
    def whole_card(self) -> bool:
        """It fits, but took (nearly) all of the device's memory (device.takes_whole_card)."""
        return self.fits and takes_whole_card(self.peak_reserved, self.device_bytes)


@dataclass(frozen=True)
class Delta:
    """A cell judged against the baseline cell of its row."""

    mark: Mark
    reserved: float | None = None     # peak reserved: this / baseline - 1
    throughput: float | None = None   # throughput median: this / baseline - 1
    p_value: float | None = None      # two-sided Welch test on log throughput
    why: Why | None = None
    budgets: tuple[int | None, int | None] | None = None   # (baseline, this) where they differ


def cell_of(records: list[TrialRecord]) -> Cell:
    ms = [r.measurement for r in records if r.state.fits and r.measurement is not None]
    bad = Counter(r.state.value for r in records if not (r.state.fits and r.measurement is not None))
    samples = tuple(m.throughput for m in ms if m.throughput is not None)
    ratios = [m.reserved_ratio for m in ms if m.reserved_ratio is not None]
    sources = Counter(m.throughput_source.value for m in ms if m.throughput is not None and m.throughput_source)
    return Cell(
        trials=len(records),
        failure=bad.most_common(1)[0][0] if bad else None,
        failed=sum(bad.values()),
        workload_hash=records[0].workload_hash,
        budget_bytes=records[0].budget_bytes,
        peak_reserved=statistics.median(m.peak_reserved_bytes for m in ms) if ms else None,
        ratio=statistics.median(ratios) if ratios else None,
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
    reserved = b.peak_reserved / a.peak_reserved - 1 if a.peak_reserved and b.peak_reserved is not None else None
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
