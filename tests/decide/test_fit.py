"""The curve of memory in a parameter and the largest value under a limit, on cases whose answers are known."""
from __future__ import annotations

import math

import pytest

from alloctune.decide.fit import (EXTRAPOLATION, MAX_VALUES, Basis, Point, copies, falls, fit, largest, search_next,
                                  step_of, to_record, values_answered)

GiB = 2**30


def test_a_line_through_exact_points_has_no_error_and_predicts_between_and_beyond():
    curve = fit([8, 16, 32], [10 * GiB + 8 * GiB, 10 * GiB + 16 * GiB, 10 * GiB + 32 * GiB])
    assert curve.degree == 1 and curve.points == 3 and curve.loo_weak
    assert curve.max_error < 1e-12 and curve.loo_error is not None and curve.loo_error < 1e-12
    assert curve.at(24) == pytest.approx(34 * GiB) and curve.at(64) == pytest.approx(74 * GiB)


def test_two_points_have_no_leave_one_out_and_one_point_is_a_constant():
    two = fit([1, 2], [3 * GiB, 5 * GiB])
    assert two.degree == 1 and two.loo_error is None and two.max_error < 1e-12
    one = fit([4], [7 * GiB])
    assert one.degree == 0 and one.loo_error is None and one.at(100) == pytest.approx(7 * GiB)


def test_memory_in_the_square_of_the_value_is_fitted_by_a_parabola_once_four_points_can_tell():
    values = [128, 256, 512, 1024]
    peaks = [GiB + v * v * 4096 for v in values]
    curve = fit(values, peaks)
    assert curve.degree == 2 and curve.loo_error is not None and curve.loo_error < 1e-6
    line = fit(values[:3], peaks[:3])   # three points: only a line, and its leave-one-out says it misses
    assert line.degree == 1 and line.loo_error is not None and line.loo_error > 0.1


def test_a_noisy_line_keeps_the_line_and_states_its_errors():
    values = [8, 16, 24, 32, 40]
    peaks = [GiB * (10 + v) * (1 + 0.01 * (-1) ** i) for i, v in enumerate(values)]
    curve = fit(values, [round(p) for p in peaks])
    assert curve.degree in (1, 2) and not curve.loo_weak
    assert 0 < curve.max_error < 0.02 and curve.loo_error is not None and curve.loo_error >= curve.max_error


def test_fit_refuses_repeated_values_and_mismatched_lists():
    with pytest.raises(ValueError):
        fit([8, 8], [1, 2])
    with pytest.raises(ValueError):
        fit([8, 16], [1])


def _line(values, base=10 * GiB, per=GiB):
    return fit(values, [base + per * v for v in values])


def test_the_largest_value_between_recorded_points_comes_from_the_curve_below_a_failing_point():
    values = [8, 16, 32]
    curve = _line(values)
    capacity = 10 * GiB + 27 * GiB     # room for 27 units; 32 does not run, 16 does
    points = [Point(v, 10 * GiB + v * GiB, v <= 16) for v in values]
    answer = largest(points, curve, capacity, step=8)
    assert (answer.value, answer.basis, answer.next_value, answer.capped) == (24, Basis.INTERPOLATED, 32, False)
    assert answer.need_bytes == 34 * GiB and answer.headroom_bytes == 3 * GiB


def test_where_the_curve_decides_its_value_must_fit_with_the_curves_own_error_on_top():
    """The H200's Trainer job under the default: peaks at batch 8, 16, 32 off a line (leave-one-out 36%); under
    42.87 GiB the bare line gave batch 24 (37.7 GiB), which retried an allocation on the GPU."""
    values, peaks = [8, 16, 32], [16391340032, 31750881280, 50790924288]
    curve = fit(values, peaks)
    assert curve.margin == curve.loo_error and 0.3 < curve.margin < 0.4
    capacity = 46030913535
    points = [Point(v, p, p <= capacity) for v, p in zip(values, peaks)]
    answer = largest(points, curve, capacity, step=8)
    assert (answer.value, answer.basis, answer.next_value) == (16, Basis.REPLAYED, 24)
    assert curve.at(24) < capacity < curve.at(24) * (1 + curve.margin)   # the bare line would have said 24
    exact = _line(values)   # a curve that misses nothing keeps the bare answer
    assert exact.margin < 1e-12 and largest([Point(v, 10 * GiB + v * GiB, v <= 16) for v in values], exact,
                                            37 * GiB, step=8).value == 24


def test_two_points_allow_for_their_error_at_the_points_which_a_line_through_them_does_not_have():
    assert fit([1, 2], [3 * GiB, 5 * GiB]).margin < 1e-12


def test_a_recorded_point_that_does_not_run_stops_the_answer_whatever_the_curve_says():
    values = [8, 16, 32]
    points = [Point(8, 18 * GiB, True), Point(16, 26 * GiB, False), Point(32, 42 * GiB, True)]
    answer = largest(points, _line(values), 100 * GiB, step=8)
    assert (answer.value, answer.basis, answer.next_value) == (8, Basis.REPLAYED, 16)


def test_a_value_below_a_recorded_point_that_runs_runs():
    points = [Point(8, 18 * GiB, True), Point(16, 26 * GiB, True)]
    wrong = fit([8, 16], [40 * GiB, 50 * GiB])    # a curve far above the replays: the replay above decides
    answer = largest(points, wrong, 27 * GiB, step=4)
    assert (answer.value, answer.basis) == (16, Basis.REPLAYED)


def test_nothing_fits_and_everything_fits_up_to_the_extrapolation_limit():
    values = [8, 16]
    none = largest([Point(v, 10 * GiB + v * GiB, False) for v in values], _line(values), GiB, step=8)
    assert none.value is None and none.basis is None and none.next_value == 8
    every = largest([Point(v, 10 * GiB + v * GiB, True) for v in values], _line(values), 10**6 * GiB, step=8)
    assert every.value == int(EXTRAPOLATION * 16) and every.capped and every.basis is Basis.EXTRAPOLATED
    assert every.next_value == every.value + 8


def test_a_curve_that_falls_past_the_recorded_values_extrapolates_nothing():
    """Two traces of different jobs fell from 576 to 108 MiB as the batch doubled, and the falling line answered
    '32+ extrapolated' on any card."""
    points = [Point(8, 576 * 2**20, True), Point(16, 108 * 2**20, True)]
    down = fit([8, 16], [576 * 2**20, 108 * 2**20])
    assert falls(down, [8, 16])
    answer = largest(points, down, 24 * GiB, 8)
    assert (answer.value, answer.basis, answer.capped, answer.next_value) == (16, Basis.REPLAYED, True, 24)
    flat = fit([8, 16, 32], [106 * 2**20, 106 * 2**20, 104 * 2**20])   # a dip within FALL (5%) is no fall
    assert not falls(flat, [8, 16, 32])
    assert largest([Point(v, 106 * 2**20, True) for v in (8, 16, 32)], flat, 24 * GiB, 8).value == 64
    # a parabola that turns down past the last value predicts less memory there than it needs: nothing beyond
    bent = fit([1, 2, 3, 4], [GiB, 2 * GiB, 2.8 * GiB, 3.2 * GiB])
    assert bent.degree == 2 and falls(bent, [1, 2, 3, 4])


def test_step_and_copies():
    assert step_of([8, 16, 32]) == 8 and step_of([96, 128]) == 32 and step_of([3, 5]) == 1
    assert copies(10 * GiB, GiB, 80 * GiB) == 7          # 7 * 11 GiB = 77 GiB
    # a job that runs alone (its least room) though its peak without a limit and a context do not fit: that one copy
    assert copies(10 * GiB, GiB, 10 * GiB) == 1
    assert math.isclose(copies(GiB // 2, GiB // 2, 24 * GiB), 24)


def test_the_search_walks_a_step_at_a_time_to_where_a_run_and_a_failure_meet():
    assert search_next([(24, True), (32, False)], 8) is None                 # the checks agreed: nothing to search
    assert search_next([(32, True), (40, True)], 8) == 48                   # more ran than predicted: up
    assert search_next([(40, False), (48, False)], 8) == 32                 # less: down
    assert search_next([(40, False), (48, False), (32, True)], 8) is None   # 32 runs, 40 does not
    assert search_next([(8, False), (16, False)], 8) is None                # nothing lies below the smallest
    assert search_next([(16, True), (40, False)], 8) == 32                  # a gap of several steps: closed from above
    assert search_next([(24, False), (32, True)], 8) == 16                  # a run above a failure counts for nothing



def test_an_answer_is_exact_where_its_value_and_the_next_are_both_recorded():
    values = [8, 16, 24, 32]
    points = [Point(v, 10 * GiB + v * GiB, v <= 24) for v in values]
    settled = largest(points, _line(values), 34 * GiB + GiB // 2, step=8)
    assert (settled.value, settled.basis, settled.next_value, settled.next_replayed, settled.exact) == \
        (24, Basis.REPLAYED, 32, True, True)
    between = largest([p for p in points if p.value != 24], _line([8, 16, 32]), 34 * GiB + GiB // 2, step=8)
    assert (between.value, between.basis, between.exact) == (24, Basis.INTERPOLATED, False)
    short = largest([p for p in points if p.value != 32], _line([8, 16, 24]), 34 * GiB + GiB // 2, step=8)
    assert (short.value, short.next_value, short.next_replayed, short.exact) == (24, 32, False, False)
    none = largest([Point(8, 18 * GiB, False)], _line([8]), GiB, step=8)
    assert none.value is None and none.exact   # the smallest value's own replay says nothing runs


def test_the_values_to_record_settle_most_answers_first_then_the_smaller():
    values = [8, 16]
    points = [Point(v, 10 * GiB + v * GiB, True) for v in values]
    curve = _line(values)
    a = largest(points, curve, 10 * GiB + 28 * GiB, step=8, margin=0.0)   # 24 by the curve, 32 the next
    b = largest(points, curve, 10 * GiB + 36 * GiB, step=8, margin=0.0)   # 32, 40 the next
    assert (a.value, a.next_value, b.value, b.next_value) == (24, 32, 32, 40)
    assert to_record([a, b], recorded=values) == [32, 24, 40]   # 32 settles both
    assert to_record([a, b], recorded=[*values, 32], skip=[24]) == [40]
    exact = largest([Point(8, 18 * GiB, True), Point(16, 26 * GiB, False)], curve, 22 * GiB, step=8)
    assert (exact.value, exact.next_value, exact.exact) == (8, 16, True) and to_record([exact], recorded=values) == []


def test_a_margin_holds_the_curve_back_and_the_bare_curve_is_where_the_recordings_go():
    """The H200 Trainer job's default (leave-one-out 36%): with the margin the curve answers 16, the bare curve 24,
    which is where the recording that settles it goes; the value the leave-one-out missed most is named."""
    values, peaks = [8, 16, 32], [16391340032, 31750881280, 50790924288]
    curve = fit(values, peaks)
    assert curve.loo_worst in values
    points = [Point(v, p, p <= 46030913535) for v, p in zip(values, peaks)]
    assert largest(points, curve, 46030913535, step=8).value == 16
    assert largest(points, curve, 46030913535, step=8, margin=0.0).value == 24


def test_the_values_an_answer_walks_are_counted_before_any_is_walked():
    assert values_answered([8, 16, 32], 8) == 8 + 3
    assert values_answered([1, 100_000_000], 1) > MAX_VALUES
    # a walk that stops early never holds the candidates: an answer under a small limit over a huge range is quick
    points = [Point(1, GiB, True), Point(10**9, 10**6 * GiB, False)]
    assert largest(points, _line([1, 10**9]), 2 * GiB, step=1).value is not None
