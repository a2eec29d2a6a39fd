"""Small pure statistics for repeats of a trial.

Throughput of one setting spreads ~±6% between fresh processes with outliers ~20% low (H200, torch 2.11), so:
outliers are flagged with the modified z-score (Iglewicz & Hoaglin) and left out of the tests; the centre is the
median; intervals and tests work on log-throughput (a slowdown is a ratio) with Welch's t, which, unlike a rank
test, can reach significance with three repeats a side. A difference that the test cannot tell from noise is
reported as no difference. What they return, `Summary` and `Comparison`, and the level they test at (ALPHA) are
results/figures.py's: choice.json keeps them.
"""
from __future__ import annotations

import math
import statistics
from functools import cache
from types import ModuleType

from ..results.figures import ALPHA, LARGEST, Comparison, Summary

OUTLIER_Z = 3.5   # modified z-score beyond which a sample is an outlier (Iglewicz & Hoaglin)
# Rounds needed before a paired comparison leaves an outlying round out: with 3 or 4 rounds, two that happen to
# agree closely make the MAD tiny and the third an "outlier", and dropping it fakes a significant difference.
PAIRED_OUTLIER_MIN = 6


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return LARGEST


def _ratio(candidate: float, baseline: float) -> float:
    """candidate / baseline; against no throughput (a folder that recorded 0), the largest (1.0 where both are 0)."""
    if baseline > 0:
        return min(candidate / baseline, LARGEST)
    return 1.0 if candidate == baseline else LARGEST


@cache
def _scipy() -> ModuleType:
    """scipy.stats, loaded when a t-distribution is first wanted: the load costs each process a second of CPU, and
    most runs never need one (a simulated sweep, diagnose, a report of single runs)."""
    from scipy import stats

    return stats


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
    half = _scipy().t.ppf(0.5 + confidence / 2, len(logs) - 1) * sd / math.sqrt(len(logs))
    return Summary(len(values), med, _exp(mean - half), _exp(mean + half), outliers)


def _log_interval(centre: float, se: float, df: float, confidence: float = 1 - ALPHA) -> tuple[float, float]:
    half = float(_scipy().t.ppf(0.5 + confidence / 2, df)) * se
    return _exp(centre - half), _exp(centre + half)


def compare_paired(pairs: list[tuple[float, float]], tolerance: float = 0.0) -> Comparison:
    """(baseline, candidate) throughputs measured back to back in the same round: the ratio is taken per round,
    so drift of the machine that both members of a pair share cancels, and a t-interval on the log ratios gives
    the ratio's 95% interval. From PAIRED_OUTLIER_MIN rounds on, outlying rounds (modified z-score of the log
    ratio) are left out. Degenerate cases
    are decided, not crashed on: one pair -> no interval and no p-values; identical ratios -> a point interval,
    differ iff the ratio is not 1."""
    if not pairs:
        raise ValueError("compare_paired() needs at least one pair")
    if any(b <= 0 or c <= 0 for b, c in pairs):
        raise ValueError("compare_paired() needs positive throughputs")
    logs = [math.log(c) - math.log(b) for b, c in pairs]   # c / b may underflow to 0
    if len(logs) >= PAIRED_OUTLIER_MIN:
        logs = inliers(logs)
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return Comparison(_exp(mean), None, None, tolerance, pairs=len(logs))
    shift = math.log(1 - tolerance) if tolerance < 1 else -math.inf
    sd = statistics.stdev(logs)
    if sd == 0:
        return Comparison(_exp(mean), 0.0 if mean != 0 else 1.0, 0.0 if mean < shift else 1.0, tolerance,
                          _exp(mean), _exp(mean), len(logs))
    se, df = sd / math.sqrt(len(logs)), len(logs) - 1
    p_two = float(2 * _scipy().t.sf(abs(mean) / se, df))
    # H1: the mean log ratio is below log(1 - tolerance), i.e. the candidate is slower than the tolerance allows.
    p_slow = float(_scipy().t.cdf((mean - shift) / se, df))
    low, high = _log_interval(mean, se, df)
    return Comparison(_exp(mean), p_two, p_slow, tolerance, low, high, len(logs))


def compare(baseline: list[float], candidate: list[float], tolerance: float = 0.0) -> Comparison:
    """Welch's t on log samples (outliers left out). Degenerate cases are decided, not crashed on:
    fewer than 2 samples a side -> no p-values; zero spread on both sides -> differ iff the values differ."""
    if not baseline or not candidate:
        raise ValueError("compare() needs samples on both sides")
    ratio = _ratio(statistics.median(candidate), statistics.median(baseline))
    a, b = inliers(baseline), inliers(candidate)
    if len(a) < 2 or len(b) < 2 or min(a + b) <= 0:
        return Comparison(ratio, None, None, tolerance)
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    shift = math.log(1 - tolerance) if tolerance < 1 else -math.inf
    va, vb = statistics.variance(la), statistics.variance(lb)
    diff = statistics.fmean(lb) - statistics.fmean(la)
    if va == 0 and vb == 0:
        return Comparison(ratio, 0.0 if diff != 0 else 1.0, 0.0 if diff < shift else 1.0, tolerance,
                          _exp(diff), _exp(diff))
    p_two = float(_scipy().ttest_ind(lb, la, equal_var=False).pvalue)
    # H1: mean(log b) - mean(log a) < log(1 - tolerance), i.e. b is slower than the tolerance allows.
    p_slow = float(_scipy().ttest_ind([x - shift for x in lb], la, equal_var=False, alternative="less").pvalue)
    # Welch-Satterthwaite degrees of freedom for the interval of the difference of log means.
    qa, qb = va / len(la), vb / len(lb)
    df = (qa + qb) ** 2 / ((qa ** 2 / (len(la) - 1) if qa else 0) + (qb ** 2 / (len(lb) - 1) if qb else 0))
    low, high = _log_interval(diff, math.sqrt(qa + qb), df)
    return Comparison(ratio, p_two, p_slow, tolerance, low, high)


def finite(value: float) -> float | None:
    """A figure as files keep it: None where it is not finite (JSON holds no infinity)."""
    return value if math.isfinite(value) else None


def relative_spread(values: list[float]) -> float:
    """max / min - 1 over the samples: 0.0 when repeats agree exactly (memory peaks of a seeded workload should)."""
    if not values:
        return 0.0
    lo, hi = min(values), max(values)
    if lo <= 0:
        return 0.0 if hi == lo else math.inf
    return hi / lo - 1


def rounds_needed(detectable: float, rounds: int, goal: float, most: int = 10_000) -> int:
    """Rounds whose t-interval would be ±goal at the spread implied by a half-width `detectable` over `rounds`
    (`most` where more)."""
    sd = math.log1p(detectable) * math.sqrt(rounds) / float(_scipy().t.ppf(0.975, rounds - 1))
    n = 2
    while n < most and float(_scipy().t.ppf(0.975, n - 1)) * sd / math.sqrt(n) > math.log1p(goal):
        n += 1
    return n
