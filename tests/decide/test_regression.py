"""compare's judgement as data (decide/regression.py): a cell against its row's baseline cell gives a mark, the
figures it rests on and a code for what qualifies it; the words are report/compare.py's (tests/report)."""
from __future__ import annotations

import pytest
from folders import repeats, trial

from alloctune.decide.regression import Mark, Why, cell_of, judge
from alloctune.results.records import TrialState
from alloctune.units import GiB


def cell(conf="", **kw):
    return cell_of(repeats(conf, **kw))


def test_memory_and_throughput_beyond_the_factor_mark_a_change():
    base = cell()
    up = judge(base, cell(reserved=16.0))   # +6.7% peak reserved
    assert (up.mark, up.why, up.reserved) == (Mark.REGRESSION, None, pytest.approx(1 / 15))
    assert judge(base, cell(reserved=14.0)).mark is Mark.IMPROVEMENT
    slower = judge(base, cell(tputs=(80.0, 81.0, 79.0)))
    assert slower.mark is Mark.REGRESSION and slower.throughput == pytest.approx(-0.2) and slower.p_value < 0.05
    assert judge(base, cell(tputs=(97.0, 97.2, 96.8))).mark is Mark.WITHIN_FACTOR   # significant, under 5%
    assert judge(base, cell(tputs=(97.0, 97.2, 96.8)), factor=0.01).mark is Mark.REGRESSION
    assert judge(base, cell(tputs=(100.5, 99.0, 100.0))).mark is Mark.SAME


def test_what_cannot_be_compared_says_why_as_a_code():
    base = cell()
    assert judge(None, base) == judge(base, None) == judge(None, None)
    assert judge(base, None).mark is Mark.INCOMPARABLE and judge(base, None).why is Why.MISSING
    other = cell_of([trial(whash="h2")])
    assert (judge(base, other).mark, judge(base, other).why) == (Mark.INCOMPARABLE, Why.WORKLOAD_DIFFERS)
    budget = judge(base, cell(budget=24 * GiB))
    assert (budget.mark, budget.why, budget.budgets) == (Mark.INCOMPARABLE, Why.BUDGET_DIFFERS, (None, 24 * GiB))
    once = judge(cell_of([trial(tput=100.0)]), cell_of([trial(tput=80.0)]))
    assert (once.mark, once.why, once.p_value) == (Mark.SAME, Why.UNTESTED, None)


def test_failures_are_judged_across_budgets_too():
    base, oom = cell(), cell_of([trial(state=TrialState.OOM, budget=16 * GiB)] * 2)
    new = judge(base, oom)
    assert (new.mark, new.why, new.budgets) == (Mark.NEW_FAILURE, Why.FAILED, (None, 16 * GiB))
    assert (oom.failure, oom.failed, oom.trials) == ("oom", 2, 2)
    assert judge(oom, base).mark is Mark.FIXED_FAILURE
    both = judge(oom, oom)
    assert (both.mark, both.why, both.budgets) == (Mark.BOTH_FAIL, Why.FAILED, None)
