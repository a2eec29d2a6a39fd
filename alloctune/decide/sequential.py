"""A sequential non-inferiority test of paired log ratios: looked at after every round, its error stays at α.

The question of `--repeats auto`: is a setting no slower than the default by more than the margin m
(`--max-slowdown`)? On the mean log ratio μ (setting over default, per round) two one-sided tests at one point,
μ0 = log(1 - m):

- accept (no slower than the margin) when H0: μ ≤ μ0 is rejected;
- refuse (slower beyond the margin) when H0': μ ≥ μ0 is rejected.

Each is a group-sequential test over the looks that rounds make (one per round, from the first look to the cap,
the planned horizon), with Lan–DeMets O'Brien–Fleming-type spending: by a fraction t of the rounds it has spent
α*(t) = 2 - 2Φ(z(1 - α/2) / √t), so α in all at the cap and little early, when few rounds say little. The
statistic is the t of the log ratios; its boundaries are calibrated by simulating the rounds (`bounds`), so they
hold for few rounds and for the default runs that adjacent rounds share. A setting at the margin is thereby
accepted in at most α of sweeps, and refused in at most α, however often the rounds look; one no slower than the
default is refused, and one further beyond the margin accepted, less often still. The two sides are non-binding
(each calibrated as if the other did not stop), which errs to the safe side. Neither crossed at the cap:
inconclusive.

Pure functions; numpy and scipy are loaded when a boundary is first wanted (the CLI's start-up needs neither).
"""
from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass
from functools import cache

ALPHA = 0.05
_SWEEPS = 100_000    # simulated sweeps the boundaries are calibrated on (each counted twice: `bounds`)
_SEED = 28


class Outcome(str, enum.Enum):
    ACCEPTED = "accepted"           # no slower than the margin: the accept boundary crossed
    REFUSED = "refused"             # slower beyond the margin: the refuse boundary crossed
    INCONCLUSIVE = "inconclusive"   # the cap reached with neither crossed
    CONTINUE = "continue"           # neither crossed, rounds left

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Look:
    """One look's decision and what it rests on: `t` the statistic (mean log ratio minus log(1 - margin), over its
    standard error; ±inf with no spread), `bound` the t boundary (accept at t ≥ bound, refuse at t ≤ -bound;
    None before the first look)."""

    outcome: Outcome
    pairs: int
    t: float | None = None
    bound: float | None = None


def spent(fraction: float, alpha: float = ALPHA) -> float:
    """Lan–DeMets O'Brien–Fleming-type spending: the error spent by `fraction` (0-1) of the horizon."""
    from scipy.stats import norm

    if fraction <= 0:
        return 0.0
    return float(2 * norm.sf(norm.isf(alpha / 2) / math.sqrt(min(fraction, 1.0))))


@cache
def bounds(horizon: int, first: int, alpha: float = ALPHA) -> tuple[float, ...]:
    """The t boundaries of looks after every round from `first` (at least 2) to `horizon`, each spending
    `spent(n / horizon) - spent(previous / horizon)`, calibrated on simulated sweeps of the rounds themselves
    (seeded: the same boundaries every time). Each simulated round is a setting's run against the default's
    interpolated midway between its two runs, every run equally noisy, as a sweep's rounds are: adjacent rounds
    share a default run, so their ratios correlate (+1/6; midway is the most), which a t statistic's spread does
    not see, and few rounds leave the spread itself uncertain. The normal approximation with t quantiles per look
    errs on both counts (in simulation 5.6% for 5% with independent rounds, 8% with shared default runs); these
    boundaries do not. The t statistic does not depend on the noise's size, so one calibration holds for all."""
    import numpy as np

    rng = np.random.default_rng(_SEED)
    total, before, out = 2 * _SWEEPS, 0, []
    # each simulated sweep counted twice, as drawn and mirrored (the null is symmetric): `up` and `down` say
    # which have not crossed the boundary, as drawn and mirrored
    up, down = np.ones(_SWEEPS, bool), np.ones(_SWEEPS, bool)
    base, sums, squares = rng.standard_normal(_SWEEPS), np.zeros(_SWEEPS), np.zeros(_SWEEPS)
    for n in range(1, horizon + 1):
        nxt = rng.standard_normal(_SWEEPS)
        ratio = rng.standard_normal(_SWEEPS) - (base + nxt) / 2
        base, sums, squares = nxt, sums + ratio, squares + ratio ** 2
        if n < first:
            continue
        mean = sums / n
        t = mean / np.sqrt(np.maximum(squares - n * mean ** 2, 1e-300) / (n - 1) / n)
        crossings = int(round((spent(n / horizon, alpha) - spent(before / horizon, alpha)) * total))
        pool = np.concatenate([t[up], -t[down]])
        bound = float(np.partition(pool, -crossings)[-crossings]) if 0 < crossings <= len(pool) else math.inf
        up &= t < bound
        down &= -t < bound
        out.append(bound)
        before = n
    return tuple(out)


def t_bound(pairs: int, horizon: int, first: int, alpha: float = ALPHA) -> float:
    """The boundary at the look after `pairs` rounds (`bounds`); beyond the horizon, the last. A horizon before
    the first look (or before 2 rounds) is one look at the first."""
    first = max(2, min(first, horizon))
    horizon = max(horizon, first)
    return bounds(horizon, first, alpha)[min(max(pairs, first), horizon) - first]


def look(logs: list[float], margin: float, horizon: int, first: int, alpha: float = ALPHA) -> Look:
    """The decision after the rounds whose log ratios (setting over default) are `logs`, with looks every round
    from `first` (at least 2: a spread needs two) to `horizon` (the cap), where neither boundary crossed is
    inconclusive. Zero spread decides on the mean's side of log(1 - margin) at once (a mean exactly there waits)."""
    n = len(logs)
    if n < max(2, first):
        return Look(Outcome.INCONCLUSIVE if n >= horizon else Outcome.CONTINUE, n)
    shift = math.log1p(-margin) if margin < 1 else -math.inf
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    gap = mean - shift
    t = gap / (sd / math.sqrt(n)) if sd > 0 else math.copysign(math.inf, gap) if gap else 0.0
    bound = t_bound(n, horizon, first, alpha)
    outcome = (Outcome.ACCEPTED if t >= bound else Outcome.REFUSED if t <= -bound
               else Outcome.INCONCLUSIVE if n >= horizon else Outcome.CONTINUE)
    return Look(outcome, n, t, bound)
