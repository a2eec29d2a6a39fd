"""The speed plan's rules (decide/confirm.py) on replays built by hand, priced by the committed H200 calibration
against a default measured at 20 ms a step: which setting one pair confirms, which get rounds, which are not
measured, and when a confirmation sends its winner to rounds."""
from __future__ import annotations

from pathlib import Path

from alloctune.decide.confirm import confirmation, needs_rounds, plan_speed
from alloctune.decide.reasons import Code
from alloctune.decide.speed import Unpredicted, predict
from alloctune.decide.summary import summarize_settings
from alloctune.results.calibration import read_calibration
from alloctune.results.records import DriverWork, Measurement, TrialRecord, TrialState
from alloctune.units import GiB, MiB

H200 = read_calibration(Path(__file__).parents[1] / "fixtures" / "calibration" / "h200-torch2.11.json")
ES, RP, ASYNC = "expandable_segments:True", "roundup_power2_divisions:4", "backend:cudaMallocAsync"
STEP = 0.02


def replays(*settings: tuple[str, float, str]) -> list:
    """(conf, peak reserved GiB, 'ok' or 'oom') replayed under a budget of 30 GiB."""
    return summarize_settings([TrialRecord(
        workload="w", workload_hash="h", conf=conf, repeat=0, env_id="sim:t", backend="sim", state=TrialState(state),
        budget_bytes=30 * GiB, measurement=Measurement(peak_reserved_bytes=int(gib * GiB),
                                                       peak_allocated_bytes=10 * GiB)) for conf, gib, state in settings])


def priced(calibration=H200, **work):
    return predict(DriverWork(steps=50, **work), DriverWork(steps=50), STEP, calibration)


def test_the_first_negligible_setting_is_confirmed_and_the_rest_lose_to_it_but_the_default():
    group = replays(("", 28, "ok"), (ES, 20, "ok"), (RP, 20.1, "ok"), ("max_split_size_mb:512", 25, "ok"))
    plan = plan_speed(group, {c: priced() for c in ("", ES, RP, "max_split_size_mb:512")}, [], 0.02)
    assert plan.winner == ES and plan.rounds == ()
    assert [(c, r.code) for c, r in plan.skipped] == [(RP, Code.LOSES_TIE), ("max_split_size_mb:512",
                                                                           Code.LOSES_ON_MEMORY)]


def test_without_a_calibration_what_could_win_gets_rounds_and_the_default_is_confirmed():
    group = replays(("", 28, "ok"), (ES, 20, "ok"))
    plan = plan_speed(group, {c: priced(None) for c in ("", ES)}, [], 0.02)
    assert plan.winner == "" and [(c, r.code) for c, r in plan.rounds] == [(ES, Code.UNPREDICTED)]
    assert plan.rounds[0][1].figures.why is Unpredicted.NO_CALIBRATION


def test_a_backend_switch_is_measured_where_nothing_native_fits_the_budget():
    plan = plan_speed(replays(("", 40, "oom"), (ES, 35, "oom")), {"": priced(), ES: priced()}, [ASYNC], 0.02)
    assert plan.winner is None and [(c, r.code) for c, r in plan.rounds] == [(ASYNC, Code.ASYNC_MEASURED)]
    assert plan.rounds[0][1].figures.budget_bytes == 30 * GiB


def test_only_a_confirmation_slower_than_predicted_beyond_its_noise_sends_the_winner_to_rounds():
    p = priced(device_allocs=1, device_alloc_bytes=20 * MiB)
    slower, faster, close = (confirmation(pair, p) for pair in ((100.0, 80.0), (100.0, 125.0), (100.0, 90.0)))
    assert (slower.code, faster.code, close.code) == (Code.DISAGREES, Code.DISAGREES, Code.CONFIRMED)
    assert needs_rounds(slower) and not needs_rounds(faster) and not needs_rounds(close)


def test_a_setting_that_ties_with_the_default_says_its_predicted_slowdown_beyond_the_allowance():
    """The H200's empty_cache job: expandable segments tied the default's peak and lost the tie on keys, while its
    replay predicted it 17% slower (results/h200-plan-examples-2026-12-02); the tie alone would hide that."""
    group = replays(("", 11.74, "ok"), (ES, 11.73, "ok"), (RP, 11.745, "ok"))
    slow = priced(device_allocs=20.0, device_alloc_bytes=20.0 * GiB, device_frees=20.0, device_free_bytes=20.0 * GiB)
    plan = plan_speed(group, {"": priced(), ES: slow, RP: priced()}, [], 0.02)
    assert plan.winner == ""
    reasons = dict(plan.skipped)
    assert reasons[ES].code is Code.LOSES_TIE and reasons[RP].code is Code.LOSES_TIE
    assert reasons[ES].figures.predicted_slowdown == slow.predicted_slowdown > 0.02
    assert reasons[ES].figures.max_slowdown == 0.02
    assert reasons[RP].figures.predicted_slowdown is None   # within the allowance: the tie says it all
