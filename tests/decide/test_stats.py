import math

import pytest

from alloctune.decide.stats import compare, compare_paired, inliers, outlier_mask, relative_spread, summarize


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


def _finite(c):
    values = [c.ratio, c.p_value, c.p_slower, c.ci_low, c.ci_high, c.half_width]
    return all(v is None or math.isfinite(v) for v in values)


def test_paired_one_pair_has_a_ratio_but_no_interval():
    c = compare_paired([(100.0, 95.0)], tolerance=0.02)
    assert c.ratio == pytest.approx(0.95) and c.pairs == 1
    assert c.p_value is None and c.ci_low is None and c.half_width is None
    assert c.verdict == "not tested (too few repeats)" and not c.slower_beyond_tolerance


def test_paired_identical_ratios_give_a_point_interval_and_a_decision():
    same = compare_paired([(100.0, 100.0), (80.0, 80.0), (120.0, 120.0)], tolerance=0.02)
    assert same.ratio == pytest.approx(1.0) and same.half_width == pytest.approx(0.0) and same.p_value == 1.0
    assert not same.significant and not same.slower_beyond_tolerance
    slower = compare_paired([(100.0, 95.0), (80.0, 76.0)], tolerance=0.02)
    assert slower.ratio == pytest.approx(0.95) and slower.significant and slower.slower_beyond_tolerance
    assert all(map(_finite, (same, slower)))


def test_paired_refuses_no_pairs_and_non_positive_throughput():
    with pytest.raises(ValueError):
        compare_paired([])
    with pytest.raises(ValueError):
        compare_paired([(0.0, 1.0), (1.0, 1.0)])


def test_paired_design_sees_through_drift_that_welch_cannot():
    """A machine warming up: +30% over six rounds for both settings, the candidate 5% slower in every round."""
    base = [65.0, 72.0, 78.0, 82.0, 85.0, 86.0]
    cand = [b * f for b, f in zip(base, [0.95, 0.951, 0.949, 0.95, 0.952, 0.948])]
    welch = compare(base, cand, tolerance=0.02)
    paired = compare_paired(list(zip(base, cand)), tolerance=0.02)
    assert not welch.significant and welch.half_width > 0.05
    assert paired.significant and paired.slower_beyond_tolerance and paired.half_width < 0.005
    assert paired.ci_low < paired.ratio < paired.ci_high and paired.pairs == 6
    assert _finite(welch) and _finite(paired)


def test_paired_interval_narrows_with_more_rounds_and_outlying_round_is_left_out():
    ratios = [1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0]
    few = compare_paired([(100.0, 100.0 * r) for r in ratios[:3]])
    many = compare_paired([(100.0, 100.0 * r) for r in ratios])
    assert many.half_width < few.half_width
    with_outlier = compare_paired([(100.0, 100.0 * r) for r in ratios] + [(100.0, 60.0)])
    assert with_outlier.pairs == len(ratios) and with_outlier.ratio == pytest.approx(many.ratio)


def test_welch_interval_brackets_the_ratio_of_means():
    c = compare([100.0, 104.0, 96.0], [99.0, 103.0, 95.0])
    assert c.ci_low < 0.99 < c.ci_high and c.half_width > 0
    zero = compare([100.0] * 3, [97.0] * 3)
    assert zero.ci_low == pytest.approx(0.97) == zero.ci_high and zero.half_width == pytest.approx(0.0)


def test_paired_few_rounds_keep_every_round():
    """Two rounds that happen to agree must not make the third an outlier: that would fake significance."""
    c = compare_paired([(100.0, 101.7), (100.0, 101.71), (100.0, 99.8)])
    assert c.pairs == 3 and not c.significant
