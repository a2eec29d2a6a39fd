"""Small pure statistics for repeats of a trial.

Throughput of one setting spreads ~±6% between fresh processes with outliers ~20% low (H200, torch 2.11), so:
outliers are flagged with the modified z-score (Iglewicz & Hoaglin) and left out of the tests; the centre is the
median; intervals and tests work on log-throughput (a slowdown is a ratio) with Welch's t, which, unlike a rank
test, can reach significance with three repeats a side. A difference that the test cannot tell from noise is
reported as no difference.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats as _scipy

OUTLIER_Z = 3.5   # modified z-score beyond which a sample is an outlier (Iglewicz & Hoaglin)
ALPHA = 0.05


@dataclass(frozen=True)
class Summary:
    """Median and 95% interval of repeated samples; `ci` is None with fewer than 2 usable samples."""

    n: int
    median: float
    ci_low: float | None
    ci_high: float | None
    outliers: tuple[float, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Candidate against baseline. `ratio` = candidate median / baseline median.

    `p_value`: two-sided Welch test on logs that the two differ (None when either side has < 2 samples).
    `p_slower`: one-sided test that the candidate is slower than `1 - tolerance` times the baseline.
    """

    ratio: float
    p_value: float | None
    p_slower: float | None
    tolerance: float

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < ALPHA

    @property
    def slower_beyond_tolerance(self) -> bool:
        return self.p_slower is not None and self.p_slower < ALPHA

    @property
    def verdict(self) -> str:
        """'faster', 'slower', 'no significant difference', or 'not tested' with fewer than 2 samples a side."""
        if self.p_value is None:
            return "not tested (too few repeats)"
        if not self.significant:
            return "no significant difference"
        return "faster" if self.ratio > 1 else "slower"


def outlier_mask(values: list[float]) -> list[bool]:
    """True for samples whose modified z-score exceeds OUTLIER_Z; none when the MAD is 0 or n < 3."""
    if len(values) < 3:
        return [False] * len(values)
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    if mad == 0:
        return [False] * len(values)
    return [abs(0.6745 * (v - med) / mad) > OUTLIER_Z for v in values]


def inliers(values: list[float]) -> list[float]:
    return [v for v, out in zip(values, outlier_mask(values)) if not out]


def summarize(values: list[float], confidence: float = 0.95) -> Summary:
    """Median of all samples; t-interval of the geometric mean of the inliers (log scale), as a ratio scale needs."""
    if not values:
        raise ValueError("summarize() needs at least one sample")
    kept = inliers(values)
    outliers = tuple(v for v, out in zip(values, outlier_mask(values)) if out)
    med = statistics.median(values)
    if len(kept) < 2 or min(kept) <= 0:
        return Summary(len(values), med, None, None, outliers)
    logs = [math.log(v) for v in kept]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = _scipy.t.ppf(0.5 + confidence / 2, len(logs) - 1) * sd / math.sqrt(len(logs))
    return Summary(len(values), med, math.exp(mean - half), math.exp(mean + half), outliers)


def compare(baseline: list[float], candidate: list[float], tolerance: float = 0.0) -> Comparison:
    """Welch's t on log samples (outliers left out). Degenerate cases are decided, not crashed on:
    fewer than 2 samples a side -> no p-values; zero spread on both sides -> differ iff the values differ."""
    if not baseline or not candidate:
        raise ValueError("compare() needs samples on both sides")
    ratio = statistics.median(candidate) / statistics.median(baseline)
    a, b = inliers(baseline), inliers(candidate)
    if len(a) < 2 or len(b) < 2 or min(a + b) <= 0:
        return Comparison(ratio, None, None, tolerance)
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    shift = math.log(1 - tolerance) if tolerance < 1 else -math.inf
    va, vb = statistics.variance(la), statistics.variance(lb)
    if va == 0 and vb == 0:
        diff = statistics.fmean(lb) - statistics.fmean(la)
        return Comparison(ratio, 0.0 if diff != 0 else 1.0, 0.0 if diff < shift else 1.0, tolerance)
    p_two = float(_scipy.ttest_ind(lb, la, equal_var=False).pvalue)
    # H1: mean(log b) - mean(log a) < log(1 - tolerance), i.e. b is slower than the tolerance allows.
    p_slow = float(_scipy.ttest_ind([x - shift for x in lb], la, equal_var=False, alternative="less").pvalue)
    return Comparison(ratio, p_two, p_slow, tolerance)


def relative_spread(values: list[float]) -> float:
    """max / min - 1 over the samples: 0.0 when repeats agree exactly (memory peaks of a seeded workload should)."""
    if not values:
        return 0.0
    lo, hi = min(values), max(values)
    if lo <= 0:
        return 0.0 if hi == lo else math.inf
    return hi / lo - 1
