import math

import pytest

from alloctune.stats import compare, inliers, outlier_mask, relative_spread, summarize


def test_summarize_one_sample_has_no_interval():
    s = summarize([100.0])
    assert (s.n, s.median, s.ci_low, s.ci_high, s.outliers) == (1, 100.0, None, None, ())


def test_summarize_zero_spread_gives_a_point_interval():
    s = summarize([100.0, 100.0, 100.0])
    assert s.median == 100.0 and s.ci_low == pytest.approx(100.0) and s.ci_high == pytest.approx(100.0)


def test_summarize_interval_on_log_scale_brackets_the_geometric_mean():
    values = [90.0, 100.0, 110.0, 105.0]
    s = summarize(values)
    geo = math.exp(sum(map(math.log, values)) / len(values))
    assert s.ci_low < geo < s.ci_high and s.median == 102.5
    assert summarize(values, confidence=0.5).ci_high < s.ci_high  # a lower confidence gives a narrower interval


def test_outlier_is_flagged_and_left_out_of_the_interval():
    values = [100.0, 101.0, 99.0, 100.5, 60.0]
    assert outlier_mask(values) == [False, False, False, False, True]
    assert inliers(values) == values[:4]
    s = summarize(values)
    assert s.outliers == (60.0,) and s.median == 100.0 and s.ci_low > 98
    # a shared value (MAD 0) or fewer than 3 samples: nothing can be called an outlier
    assert outlier_mask([100.0, 100.0, 100.0, 50.0]) == [False] * 4
    assert outlier_mask([1.0, 1000.0]) == [False, False]


def test_summarize_refuses_no_samples():
    with pytest.raises(ValueError):
        summarize([])


def test_compare_three_against_three_clear_slowdown():
    c = compare([100.0, 100.5, 99.5], [90.0, 90.5, 89.5], tolerance=0.02)
    assert c.ratio == pytest.approx(0.9) and c.significant and c.slower_beyond_tolerance
    assert c.verdict == "slower"


def test_compare_three_against_three_within_noise():
    c = compare([100.0, 104.0, 96.0], [99.0, 103.0, 95.0], tolerance=0.02)
    assert c.ratio == pytest.approx(0.99) and not c.significant and not c.slower_beyond_tolerance
    assert c.verdict == "no significant difference"


def test_compare_faster():
    c = compare([100.0, 100.5, 99.5], [110.0, 110.5, 109.5])
    assert c.verdict == "faster" and not c.slower_beyond_tolerance


def test_compare_significantly_slower_but_within_tolerance():
    c = compare([100.0, 100.1, 99.9], [99.0, 99.1, 98.9], tolerance=0.02)
    assert c.verdict == "slower" and not c.slower_beyond_tolerance


def test_compare_one_sample_a_side_cannot_test():
    c = compare([100.0], [90.0], tolerance=0.02)
    assert c.ratio == pytest.approx(0.9) and c.p_value is None and c.p_slower is None
    assert not c.significant and not c.slower_beyond_tolerance and c.verdict == "not tested (too few repeats)"


def test_compare_zero_spread_both_sides_is_decided():
    same = compare([100.0] * 3, [100.0] * 3, tolerance=0.02)
    assert same.p_value == 1.0 and not same.significant and not same.slower_beyond_tolerance
    slower = compare([100.0] * 3, [97.0] * 3, tolerance=0.02)
    assert slower.significant and slower.slower_beyond_tolerance
    within = compare([100.0] * 3, [99.0] * 3, tolerance=0.02)
    assert within.significant and not within.slower_beyond_tolerance


def test_compare_refuses_empty_side():
    with pytest.raises(ValueError):
        compare([], [1.0])


def test_relative_spread():
    assert relative_spread([]) == 0.0
    assert relative_spread([5.0]) == 0.0
    assert relative_spread([10.0, 10.0]) == 0.0
    assert relative_spread([10.0, 10.3, 10.1]) == pytest.approx(0.03)
    assert relative_spread([0.0, 0.0]) == 0.0
    assert relative_spread([0.0, 1.0]) == math.inf
