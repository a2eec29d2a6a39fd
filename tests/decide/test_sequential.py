"""The sequential non-inferiority test of `--repeats auto`: its spending, its boundaries, and each look's decision,
degenerate cases included; its error rate checked on sweeps simulated apart from the calibration's."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from alloctune.decide.sequential import ALPHA, Look, Outcome, bounds, look, spent, t_bound

MARGIN = 0.02
AT = math.log1p(-MARGIN)   # the mean log ratio of a setting exactly at the margin


def test_spending_is_none_at_the_start_all_at_the_horizon_and_little_early():
    assert spent(0.0) == 0.0 and spent(1.0) == pytest.approx(ALPHA) and spent(2.0) == pytest.approx(ALPHA)
    fractions = [i / 10 for i in range(1, 11)]
    assert all(a < b for a, b in zip(map(spent, fractions), map(spent, fractions[1:])))
    assert spent(0.3) < ALPHA / 100     # O'Brien-Fleming: hardly anything after 3 rounds of 10


def test_boundaries_fall_towards_the_cap_and_end_above_one_looks():
    b = bounds(10, 3)
    assert len(b) == 8 and all(x > y for x, y in zip(b, b[1:]))
    # the last look must clear more than one look at 5% would, having spent part of the error before it
    assert b[-1] > stats.t.isf(ALPHA, 9)
    # a cap at the first look spends all of it there, one test at 5% (wider than t's, for the shared runs)
    assert stats.t.isf(ALPHA, 2) < bounds(3, 3)[0] < stats.t.isf(ALPHA / 2, 2)
    assert bounds(10, 3) == bounds(10, 3)   # seeded: the same every time
    # rounds past the horizon take the last boundary; a horizon below the first look is one look
    assert t_bound(12, 10, 3) == b[-1] and t_bound(2, 1, 3) == bounds(2, 2)[0]


def test_error_rate_at_the_margin_is_alpha_each_side():
    """Sweeps drawn apart from the calibration (another generator), as a sweep's rounds are: the setting between
    two default runs, every run equally noisy. Looked at after every round from the third, a setting exactly at
    the margin is accepted in about 5%, and refused in about 5%, not in 8% or more as with one look's test
    repeated."""
    rng = np.random.default_rng(12345)
    runs = rng.standard_normal((20_000, 21)) * 0.05
    logs = AT + runs[:, 1::2] - (runs[:, 0:-1:2] + runs[:, 2::2]) / 2
    outcomes = [next(o for n in range(3, 11) if (o := look(list(row[:n]), MARGIN, 10, 3).outcome)
                     is not Outcome.CONTINUE) for row in logs]
    accepted = outcomes.count(Outcome.ACCEPTED) / len(outcomes)
    refused = outcomes.count(Outcome.REFUSED) / len(outcomes)
    assert 0.04 < accepted < 0.06 and 0.04 < refused < 0.06


def test_one_round_and_before_the_first_look_wait():
    assert look([0.1], MARGIN, 10, 3) == Look(Outcome.CONTINUE, 1)
    assert look([0.1, 0.1], MARGIN, 10, 3) == Look(Outcome.CONTINUE, 2)
    assert look([], MARGIN, 10, 3) == Look(Outcome.CONTINUE, 0)
    # one round at a cap of one: nothing to test, and no rounds left
    assert look([0.1], MARGIN, 1, 3) == Look(Outcome.INCONCLUSIVE, 1)


def test_identical_ratios_decide_on_their_side_of_the_margin_and_never_give_nan():
    assert look([0.0] * 3, MARGIN, 10, 3).outcome is Outcome.ACCEPTED
    assert look([math.log(0.9)] * 3, MARGIN, 10, 3).outcome is Outcome.REFUSED
    assert look([0.0] * 3, MARGIN, 10, 3).t == math.inf
    # exactly at the margin (0 with no margin): no evidence either way, at any look
    at = look([0.0] * 3, 0.0, 10, 3)
    assert (at.outcome, at.t) == (Outcome.CONTINUE, 0.0)
    assert look([0.0] * 10, 0.0, 10, 3).outcome is Outcome.INCONCLUSIVE


def test_huge_noise_decides_nothing_and_a_clear_slowdown_is_refused():
    noisy = look([1.0, -1.0, 0.5, -0.7, 0.2], MARGIN, 10, 3)
    assert noisy.outcome is Outcome.CONTINUE and math.isfinite(noisy.t) and math.isfinite(noisy.bound)
    assert look([1.0, -1.0, 0.5, -0.7, 0.2, 0.0, 0.3, -0.4, 0.1, -0.2], MARGIN, 10, 3).outcome is Outcome.INCONCLUSIVE
    slow = [math.log(0.9) + e for e in (0.002, -0.001, 0.0, 0.001)]
    assert look(slow, MARGIN, 10, 3).outcome is Outcome.REFUSED


def test_an_early_look_asks_more_than_the_last():
    """The same 4 rounds as the 2nd look of 8 and as the last of 2: early they wait, at the cap they accept."""
    logs = [0.01, -0.01, 0.015, -0.005]
    early = look(logs, MARGIN, 10, 3)
    assert early.outcome is Outcome.CONTINUE and early.t > stats.t.isf(ALPHA, 3)
    capped = look(logs, MARGIN, 4, 3)
    assert capped.outcome is Outcome.ACCEPTED and capped.t == early.t and capped.bound < early.bound
