"""The growth check's decision (`decide/growth.py`): reserved rising from step k to 2k while allocated does not,
on the figures of pytorch#123548, on jobs that are steady or fill a cache, and on degenerate series."""
from __future__ import annotations

import pytest

from alloctune.decide.growth import MiB, Sample, Thresholds, Verdict, growth


def _series(*points):
    return [Sample(step, int(reserved * MiB), int(allocated * MiB)) for step, reserved, allocated in points]


def test_the_growth_of_issue_123548_is_flagged():
    # reserved 2,980 -> 5,760 MiB from cycle 20 to 40 while allocated went 106 -> 146 MiB
    found = growth(_series((20, 2980, 106), (40, 5760, 146)))
    assert found.verdict is Verdict.GROWING
    assert found.reason == "reserved rose 2,780 MiB from step 20 to 40 while allocated rose 40 MiB"
    assert (found.at_k.step, found.at_2k.step) == (20, 40)


@pytest.mark.parametrize("points, verdict", [
    (((10, 8000, 5000), (20, 8000, 5100)), Verdict.STEADY),       # flat
    (((10, 8000, 5000), (20, 7000, 4000)), Verdict.STEADY),       # released
    (((10, 8000, 5000), (20, 8200, 5000)), Verdict.STEADY),       # 200 MiB: under 256 MiB
    (((10, 10240, 9000), (20, 11000, 9000)), Verdict.STEADY),     # 760 MiB: under 10% of 10 GiB
    (((10, 2000, 1000), (20, 6000, 4000)), Verdict.STEADY),       # a cache filling: allocated rose with it
    (((10, 2000, 1000), (20, 2256, 1000)), Verdict.GROWING),      # exactly 256 MiB with allocated flat
    (((10, 2000, 1000), (20, 3000, 400)), Verdict.GROWING),       # allocated fell while reserved rose
    (((10, 2000, 1000), (20, 4000, 1999)), Verdict.GROWING),      # allocated rose under half of 2,000 MiB
])
def test_thresholds(points, verdict):
    assert growth(_series(*points)).verdict is verdict


def test_k_is_the_last_sample_at_or_before_half_the_last_step():
    found = growth(_series((5, 100, 50), (10, 1000, 50), (21, 1500, 50), (40, 3000, 50)))
    assert (found.at_k.step, found.at_2k.step) == (10, 40) and found.verdict is Verdict.GROWING
    later = growth(_series((5, 100, 50), (10, 1000, 50), (20, 2900, 50), (40, 3000, 50)))
    assert later.at_k.step == 20 and later.verdict is Verdict.STEADY


@pytest.mark.parametrize("points, why", [
    ((), "0 sample(s)"),
    (((10, 100, 50),), "1 sample(s)"),
    (((0, 100, 50), (1, 5000, 50)), "no sample between step 1 and step 0"),
    (((30, 100, 50), (40, 5000, 50)), "no sample between step 1 and step 20"),
])
def test_too_few_samples_decide_nothing(points, why):
    found = growth(_series(*points))
    assert found.verdict is Verdict.UNDECIDED and why in found.reason and found.at_k is None


@pytest.mark.parametrize("points, message", [
    (((10, 1, 1), (10, 2, 1)), "must rise in step"),
    (((20, 1, 1), (10, 2, 1)), "must rise in step"),
    (((10, -1, 1), (20, 2, 1)), "negative"),
])
def test_damaged_series_are_refused(points, message):
    with pytest.raises(ValueError, match=message):
        growth([Sample(s, r, a) for s, r, a in points])


def test_thresholds_can_be_given():
    points = _series((10, 1000, 500), (20, 1100, 500))
    assert growth(points).verdict is Verdict.STEADY
    assert growth(points, Thresholds(min_rise_bytes=50 * MiB)).verdict is Verdict.GROWING
