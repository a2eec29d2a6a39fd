"""An in-process confirmation judged (decide/inprocess.py, decide/confirm.py): how long its blocks are, its pairs of
blocks as the winner's comparison with the default, the confirmation it states against the prediction (with the
resolution it reached), and when the winner is confirmed in one process rather than by a pair of processes. The
records are built by hand; the blocks come from runtime/alternate.py in a real job (tests/trial/)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from alloctune.decide.choice import choose
from alloctune.decide.confirm import confirmation_of, confirmed, in_process, needs_rounds
from alloctune.decide.inprocess import MIN_PAIRS, block_pairs, block_plan, in_process_pairs
from alloctune.decide.reasons import Code
from alloctune.decide.speed import predict
from alloctune.decide.summary import summarize_settings
from alloctune.report.predicted import pair_cell
from alloctune.report.words import sentence
from alloctune.results.alternation import AlternatedBlock, Alternation, AlternationEnd
from alloctune.results.calibration import read_calibration
from alloctune.results.records import DriverWork, Measurement, TrialRecord, TrialState
from alloctune.units import GiB, MiB

H200 = read_calibration(Path(__file__).parents[1] / "fixtures" / "calibration" / "h200-torch2.11.json")
ES = "expandable_segments:True"


def test_blocks_time_seconds_of_steps_after_skipping_the_first_and_shrink_to_fit_a_short_job():
    assert block_plan(0.1).block_steps == 5 + 20 and block_plan(0.1).skip_steps == 5
    assert block_plan(1.0).block_steps == 2 + 3   # at least MIN_SKIP skipped and MIN_TIMED timed
    short = block_plan(0.1, steady_steps=100)
    assert short is not None and (short.block_steps, short.skip_steps) == (12, 4)
    assert short.block_steps * 2 * MIN_PAIRS <= 100
    assert block_plan(0.1, steady_steps=30) is None   # not MIN_PAIRS pairs of 3 timed steps


def alternation(ratios: list[float], steps: int = 10, seconds: float = 1.0) -> Alternation:
    """Blocks in the runtime's order (C D | D C | ...), the candidate taking `ratio` times the default's time."""
    blocks = []
    for i, ratio in enumerate(ratios):
        pair = [AlternatedBlock(True, steps, seconds * ratio), AlternatedBlock(False, steps, seconds)]
        blocks += pair if i % 2 == 0 else pair[::-1]
    return Alternation(against="", block_steps=steps + 2, skip_steps=2, target=0.01, end=AlternationEnd.RESOLVED,
                       blocks=blocks)


def test_each_pair_of_blocks_gives_the_defaults_rate_and_the_candidates():
    pairs = block_pairs(alternation([1.25, 0.8]))
    assert pairs == [(10.0, 8.0), (10.0, 12.5)]


def trial(conf: str, gib: float, alternated: Alternation | None = None, throughput: float = 100.0) -> TrialRecord:
    return TrialRecord(workload="w", workload_hash="h", conf=conf, repeat=0, env_id="t", backend="cuda",
                       state=TrialState.OK, measurement=Measurement(
                           peak_reserved_bytes=int(gib * GiB), peak_allocated_bytes=GiB, throughput=throughput,
                           unit="steps", measured_seconds=10.0, measured_steps=100, alternation=alternated))


RATIOS = [1.010, 1.014, 1.006, 1.012, 1.008, 1.011]   # the candidate ~1% slower, a few tenths of a percent apart


def test_the_winners_comparison_with_the_default_rests_on_its_blocks_not_on_the_two_processes():
    settings = summarize_settings([trial("", 2), trial(ES, 1, alternation(RATIOS), throughput=130.0)])
    winner = next(s for s in settings if s.conf == ES)
    assert len(winner.pairs) == len(RATIOS) == len(in_process_pairs(winner.trials))
    c = winner.vs_default
    assert c is not None and c.ratio == pytest.approx(1 / 1.0102, rel=2e-3)   # not 1.3, the processes' ratio
    assert c.half_width is not None and c.half_width < 0.01


def prediction(slowdown_calls: float):
    """A prediction for ES against a default measured at 20 ms a step: `slowdown_calls` cudaMallocs of 20 MiB."""
    return predict(DriverWork(steps=50, device_allocs=slowdown_calls, device_alloc_bytes=slowdown_calls * 20 * MiB),
                   DriverWork(steps=50), 0.02, H200)


def test_a_prediction_within_the_measured_interval_is_confirmed_with_the_resolution_reached():
    settings = summarize_settings([trial("", 2), trial(ES, 1, alternation(RATIOS))])
    p = prediction(4)   # about 1% slower
    assert 1 / (1 + p.predicted_slowdown) == pytest.approx(0.99, abs=0.003)
    (choice,) = choose(settings)
    done = confirmed(choice, {ES: p})
    said = next(r for r in done.reasons if r.code in (Code.CONFIRMED, Code.DISAGREES))
    assert said.code is Code.CONFIRMED and said.figures.blocks == 2 * len(RATIOS)
    assert said.figures.detectable == pytest.approx(choice.best.vs_default.half_width)
    assert pair_cell(said.figures) == f"0.99x ±{said.figures.detectable:.1%}, 12 blocks in one process"
    assert "12 blocks" in sentence(said) and "within the measured interval" in sentence(said)
    assert not needs_rounds(said) and done.precision == choice.precision   # a real interval: its precision stays


def test_a_prediction_outside_the_interval_disagrees_and_says_which_way_without_rounds():
    settings = summarize_settings([trial("", 2), trial(ES, 1, alternation(RATIOS))])
    winner = next(s for s in settings if s.conf == ES)
    said = confirmation_of(winner, prediction(0))   # predicted as fast as the default: measured 1% slower
    assert said is not None and said.code is Code.DISAGREES and said.figures.measured_ratio < 1
    assert "outside the measured interval (measured slower)" in sentence(said) and not needs_rounds(said)
    assert said.figures.noise == pytest.approx(
        math.sqrt(sum((math.log(r) - math.log(1.0102)) ** 2 for r in RATIOS) / 5), rel=0.05)


def test_one_pair_of_processes_is_judged_as_before():
    settings = summarize_settings([trial("", 2, throughput=100.0), trial(ES, 1, throughput=80.0)])
    said = confirmation_of(next(s for s in settings if s.conf == ES), prediction(0))
    assert said is not None and said.code is Code.DISAGREES and said.figures.blocks == 0 and needs_rounds(said)


@pytest.mark.parametrize("winner, default_fits, step, steady, torch", [
    ("", True, 0.1, None, "2.11.0"),                          # the default won: nothing to compare
    (ES, False, 0.1, None, "2.11.0"),                         # its blocks of the default would not fit
    ("backend:cudaMallocAsync", True, 0.1, None, "2.11.0"),   # chosen when torch loads
    (ES, True, 0.1, None, "2.8.0"),                           # an older run-time parse
    (ES, True, None, None, "2.11.0"),                         # no measured step of the default
    (ES, True, 0.1, 30, "2.11.0"),                            # too short a job for MIN_PAIRS pairs
])
def test_a_pair_of_processes_confirms_where_one_process_cannot(winner, default_fits, step, steady, torch):
    assert in_process(winner, torch, default_fits, step, steady, QUIET) is None


# Predictions with the H200's prices against a 50 ms step: no driver call a step under either setting; a cudaMalloc
# and a cudaFree of 20 MiB every tenth step (a variable-shape job's, about 0.02% of the step); and the H100's job
# that empties the cache every step (44 calls of 4 GiB in all, a few ms).
QUIET = predict(DriverWork(steps=10), DriverWork(steps=10), 0.05, H200)
RARE = predict(DriverWork(steps=10, device_allocs=0.1, device_alloc_bytes=2 * MiB, device_frees=0.1,
                          device_free_bytes=2 * MiB), DriverWork(steps=10), 0.05, H200)
CHURN = predict(DriverWork(steps=10, maps=44.6, map_bytes=5183 * MiB, unmaps=6.7, unmap_bytes=5085 * MiB, syncs=1),
                DriverWork(steps=10, device_allocs=22.4, device_alloc_bytes=4131 * MiB, device_frees=21.8,
                           device_free_bytes=4032 * MiB, syncs=1), 0.05, H200)


def test_a_job_whose_driver_calls_are_a_material_part_of_its_step_is_confirmed_by_a_pair_of_processes():
    """A setting switched to at run time allocates beside the segments made before the switch: where either
    setting's driver calls are a material part of the step, its blocks would not time its own; without a
    calibration, only a replay with no driver call under either setting is known to be safe."""
    assert in_process(ES, "2.11.0", True, 0.05, 1000, QUIET) is not None
    assert in_process(ES, "2.11.0", True, 0.05, 1000, RARE) is not None
    assert in_process(ES, "2.11.0", True, 0.05, 1000, CHURN) is None
    assert in_process(ES, "2.11.0", True, 0.05, 1000, None) is None
    unpriced = predict(DriverWork(steps=10), DriverWork(steps=10), 0.05, None)
    assert in_process(ES, "2.11.0", True, 0.05, 1000, unpriced) is not None
    assert in_process(ES, "2.11.0", True, 0.05, 1000, predict(RARE.work, QUIET.work, 0.05, None)) is None


def test_a_switchable_winner_of_a_long_enough_job_is_confirmed_in_one_process():
    how = in_process(ES, "2.11.0+cu130", True, 0.05, 1000, QUIET)
    assert how is not None and how.strings == (ES, "expandable_segments:False")
    assert (how.blocks.block_steps, how.blocks.skip_steps) == (10 + 40, 10)


def test_its_blocks_fit_in_the_steps_after_the_winners_replayed_peak():
    """The blocks wait for the step of the winner's replayed peak (its memory is taken at the first switch): 1000
    steady steps fit full blocks; 960 of them spent waiting leave 40, shorter blocks; 1000 spent, none (a peak in
    the teardown), and a pair of processes confirms it."""
    full = in_process(ES, "2.11.0", True, 0.05, 1000, QUIET, waits=0)
    assert full is not None and full.blocks.block_steps == 50
    short = in_process(ES, "2.11.0", True, 0.05, 1000, QUIET, waits=960)
    assert short is not None and short.blocks.block_steps * 2 * 4 <= 40
    assert in_process(ES, "2.11.0", True, 0.05, 1000, QUIET, waits=1000) is None
