"""The cost model (decide/speed.py) on built driver work and calibrations: the arithmetic of a prediction, what is
answered by the prediction alone, and each case where there is nothing to predict from."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from clirun import ROOT

from alloctune.decide.speed import PREDICTION_ERROR, PRICE_ERROR, Unpredicted, driver_seconds, predict
from dataclasses import replace

from alloctune.results.calibration import CALIBRATION_SCHEMA, BusyFit, Calibration, CostFit, CostSample, MiB
from alloctune.results.records import DriverWork


def line(fixed_us: float, per_mib_us: float) -> CostFit:
    return CostFit(fixed_us, per_mib_us, [CostSample(20 * MiB, 8, fixed_us + 20 * per_mib_us, fixed_us,
                                                     fixed_us + 40 * per_mib_us)])


# Round figures: a cudaMalloc 50 µs + 0.1 µs/MiB, a cudaFree 30 + 0.3, a map 100 + 2, an unmap 70 + 2, a sync 5.
CAL = Calibration(schema=CALIBRATION_SCHEMA, gpu="GPU", driver="1", cuda="12", torch="2.11.0",
                  measured_at="2026-12-02T00:00:00+00:00", device_alloc=line(50, 0.1), device_free=line(30, 0.3),
                  map=line(100, 2), unmap=line(70, 2), sync=line(5, 0))
QUIET = DriverWork(steps=10)   # a steady state with no driver calls
CHURN = DriverWork(steps=10, device_allocs=40, device_alloc_bytes=400 * MiB, device_frees=40,
                   device_free_bytes=400 * MiB, syncs=1)


def test_each_kind_of_call_is_priced_by_its_fit_at_the_steps_average_count_and_bytes():
    work = DriverWork(steps=4, device_allocs=2, device_alloc_bytes=10 * MiB, device_frees=1,
                      device_free_bytes=20 * MiB, maps=3, map_bytes=60 * MiB, unmaps=0.5, unmap_bytes=10 * MiB,
                      syncs=2)
    priced = driver_seconds(work, CAL)
    assert priced.device_allocs == pytest.approx((2 * 50 + 10 * 0.1) * 1e-6)
    assert priced.device_frees == pytest.approx((30 + 20 * 0.3) * 1e-6)
    assert priced.maps == pytest.approx((3 * 100 + 60 * 2) * 1e-6)
    assert priced.unmaps == pytest.approx((0.5 * 70 + 10 * 2) * 1e-6)
    assert priced.syncs == pytest.approx(2 * 5e-6)
    assert priced.total == pytest.approx((101 + 36 + 420 + 55 + 10) * 1e-6)


def test_a_setting_that_churns_where_the_default_does_not_is_predicted_slower_by_its_driver_seconds():
    churn = driver_seconds(CHURN, CAL).total   # 40 x (50 + 1) + 40 x (30 + 3) + 5 µs = 3.365 ms
    assert churn == pytest.approx(3.365e-3)
    p = predict(CHURN, QUIET, 0.05, CAL)
    assert p.unpredicted is None and p.default_driver_seconds.total == 0
    assert p.predicted_step_seconds == pytest.approx(0.05 + churn)
    assert p.predicted_slowdown == pytest.approx(churn / 0.05)
    assert p.worst_slowdown == pytest.approx(PRICE_ERROR * churn / 0.05) and p.added_syncs == 1
    assert not p.answers_alone(0.5)   # a synchronisation more than the default, however little it is priced
    # and the other way round: the default's driver time is taken out of its step
    back = predict(QUIET, CHURN, 0.05, CAL)
    assert back.predicted_step_seconds == pytest.approx(0.05 - churn)
    assert back.predicted_slowdown == pytest.approx(-churn / 0.05)
    assert back.worst_slowdown == back.predicted_slowdown and back.answers_alone(0.0)


def test_no_driver_work_predicts_the_defaults_step_and_answers_alone():
    p = predict(QUIET, QUIET, 0.05, CAL)
    assert p.predicted_step_seconds == 0.05 and p.predicted_slowdown == 0.0
    assert p.driver_seconds.total == 0 and p.worst_slowdown == 0.0 and p.answers_alone(0.0)


@pytest.mark.parametrize("max_slowdown", [0.02, 0.05])
def test_a_prediction_answers_alone_while_its_driver_time_at_the_price_error_stays_within_the_allowance(max_slowdown):
    step = 1.0
    fits = int(max_slowdown * step / PRICE_ERROR / 50.1e-6)   # cudaMalloc calls of 1 MiB (50.1 µs) just within
    under = predict(DriverWork(steps=10, device_allocs=fits, device_alloc_bytes=fits * MiB), QUIET, step, CAL)
    over = predict(DriverWork(steps=10, device_allocs=fits + 1, device_alloc_bytes=(fits + 1) * MiB), QUIET, step, CAL)
    assert under.worst_slowdown <= max_slowdown < over.worst_slowdown
    assert under.answers_alone(max_slowdown) and not over.answers_alone(max_slowdown)
    assert over.predicted_slowdown < max_slowdown   # within the allowance as predicted, not in the worst case
    # one synchronisation more than the default: its stall is unknown, whatever its fixed cost
    synced = predict(DriverWork(steps=10, syncs=1), QUIET, step, CAL)
    assert synced.driver_seconds.total == pytest.approx(5e-6) and not synced.answers_alone(max_slowdown)


def test_a_default_whose_priced_calls_exceed_its_measured_step_keeps_no_time_outside_them():
    p = predict(QUIET, CHURN, 0.001, CAL)   # 3.4 ms of priced calls in a measured 1 ms step
    assert p.predicted_step_seconds == 0.0 and p.predicted_slowdown == -1.0


@pytest.mark.parametrize("work, default, step, calibration, why", [
    (CHURN, QUIET, 0.05, None, Unpredicted.NO_CALIBRATION),
    (CHURN, QUIET, 0.0, CAL, Unpredicted.NO_STEP_TIME),
    (CHURN, QUIET, None, CAL, Unpredicted.NO_STEP_TIME),
    (DriverWork(steps=0), QUIET, 0.05, CAL, Unpredicted.NO_STEADY_STEPS),
    (CHURN, DriverWork(steps=0), 0.05, CAL, Unpredicted.NO_STEADY_STEPS),
])
def test_nothing_to_predict_from_is_said_and_predicts_nothing(work, default, step, calibration, why):
    p = predict(work, default, step, calibration)
    assert p.unpredicted is why
    assert (p.driver_seconds, p.predicted_step_seconds, p.predicted_slowdown) == (None, None, None)
    assert p.worst_slowdown is None and not p.answers_alone(0.5)
    assert json.loads(json.dumps(p.to_json()))["unpredicted"] == why.value


def test_a_prediction_as_json_keeps_the_counts_and_seconds_it_rests_on():
    data = json.loads(json.dumps(predict(CHURN, QUIET, 0.05, CAL).to_json()))
    assert data["work"]["device_allocs"] == 40 and data["default_step_seconds"] == 0.05
    assert data["driver_seconds"]["device_frees"] == pytest.approx(40 * 33e-6)
    assert data["predicted_slowdown"] == pytest.approx(3.365e-3 / 0.05) and data["unpredicted"] is None


def test_a_call_is_priced_as_it_costs_on_a_busy_device_where_that_was_measured():
    """A map measured at 100 + 2 µs/MiB on an idle device and 40 + 1.5 on a busy one: a job's maps are priced at
    the busy device's; a calibration without it (from before it was measured) prices them at the idle one's."""
    busy = BusyFit(40, 1.5, line(40, 1.5).samples, waits=0.0, queued_us=[6000, 14000])
    cal = replace(CAL, map=replace(CAL.map, busy=busy))
    work = DriverWork(steps=1, maps=2, map_bytes=100 * MiB)
    assert driver_seconds(work, cal).maps == pytest.approx((2 * 40 + 100 * 1.5) * 1e-6)
    assert driver_seconds(work, CAL).maps == pytest.approx((2 * 100 + 100 * 2) * 1e-6)
    back = Calibration.from_json(json.loads(json.dumps(cal.to_json())))
    assert back == cal and back.map.in_a_job == busy



def test_the_quoted_prediction_error_is_what_the_committed_speed_tables_give(tmp_path):
    """PREDICTION_ERROR's range and sides are scripts/jobs/prediction_error.py's over the committed tables it rests
    on (the H200's one job lies inside the range): a table committed beside them fails here until the constant says
    what the evidence does."""
    out = tmp_path / "error.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "jobs" / "prediction_error.py"), "--json", str(out)],
                   check=True, capture_output=True)
    got = json.loads(out.read_text())
    assert (round(got["low"], 3), round(got["high"], 3)) == (PREDICTION_ERROR.low, PREDICTION_ERROR.high)
    assert tuple((a["allowance"], a["clear"], a["same_side"]) for a in got["allowances"]) == PREDICTION_ERROR.sides
