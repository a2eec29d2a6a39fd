"""One setting for many jobs: the ranking on cases whose answers are known."""
from __future__ import annotations

import pytest

from alloctune.decide.fleet import rank_fleet
from alloctune.settings.conf import AllocConf

DEFAULT, EXPANDABLE, SPLIT = (AllocConf.parse(c) for c in ("", "expandable_segments:True", "max_split_size_mb:128"))


def test_the_setting_that_loses_least_in_the_worst_case_wins_and_each_job_says_what_it_gives_up():
    ranked = rank_fleet({
        "a": {DEFAULT: 100, EXPANDABLE: 110, SPLIT: 150},   # a is best under the default
        "b": {DEFAULT: 200, EXPANDABLE: 100, SPLIT: 105},   # b loses 100% under the default
    })
    assert [s.setting for s in ranked] == [EXPANDABLE, SPLIT, DEFAULT]
    best = ranked[0]
    assert best.worst == pytest.approx(0.10) and best.mean == pytest.approx(0.05) and not best.failed
    gives = {j.job: (j.loss, j.best) for j in best.jobs}
    assert gives["a"] == (pytest.approx(0.10), "default") and gives["b"] == (0.0, "expandable_segments:True")


def test_a_setting_that_does_not_run_a_job_ranks_below_every_one_that_runs_them_all():
    ranked = rank_fleet({"a": {DEFAULT: 100, EXPANDABLE: 50}, "b": {DEFAULT: 100, EXPANDABLE: None}})
    assert [s.setting for s in ranked] == [DEFAULT, EXPANDABLE]
    assert ranked[1].failed == ("b",) and ranked[0].worst == pytest.approx(1.0)


def test_a_setting_that_fits_a_job_only_with_retries_fits_it_and_ranks_after_those_without():
    """A retry is not an OOM: the setting fits the job (its loss counts, it can be the job's best), and it ranks
    after every setting that fits as many jobs without one, before any that does not fit one."""
    peaks = {"a": {DEFAULT: 100, EXPANDABLE: 90, SPLIT: None}, "b": {DEFAULT: 100, EXPANDABLE: 100, SPLIT: 50}}
    ranked = rank_fleet(peaks, {"a": {DEFAULT: 0, EXPANDABLE: 2, SPLIT: 0}, "b": {DEFAULT: 0, EXPANDABLE: 0, SPLIT: 0}})
    assert [s.setting for s in ranked] == [DEFAULT, EXPANDABLE, SPLIT]
    default, expandable, split = ranked
    assert expandable.failed == () and expandable.retried == ("a",) and expandable.jobs[0].retries == 2
    assert expandable.jobs[0].loss == 0.0 and default.jobs[0].best == "expandable_segments:True"
    assert split.failed == ("a",) and split.retried == ()
    assert rank_fleet(peaks) == rank_fleet(peaks, {})   # no retries given: none


def test_ties_go_to_fewer_keys_and_one_job_is_its_own_fleet():
    ranked = rank_fleet({"only": {EXPANDABLE: 100, DEFAULT: 100}})
    assert ranked[0].setting == DEFAULT and ranked[0].worst == 0.0


def test_a_job_no_setting_runs_has_no_best_and_is_left_out():
    ranked = rank_fleet({"a": {DEFAULT: 100, EXPANDABLE: 90}, "dead": {DEFAULT: None, EXPANDABLE: None}})
    assert [j.job for j in ranked[0].jobs] == ["a"] and ranked[0].setting == EXPANDABLE


def test_every_job_needs_every_setting():
    with pytest.raises(ValueError):
        rank_fleet({"a": {DEFAULT: 1}, "b": {EXPANDABLE: 1}})
