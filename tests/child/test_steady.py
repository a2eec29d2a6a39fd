"""Steady-state timing (the trial child's measured pass) and the conditions kept with it, on CPU: blocks cover
every step once, per-block figures add up to the totals, and every probe degrades to None without a GPU."""
from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import pytest
import torch

from alloctune.results.records import Conditions, Measurement, TrialRecord, TrialState
from alloctune.child.timing import Observer, split, timed_pass

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n, blocks", [(0, 8), (1, 8), (7, 8), (8, 8), (10, 8), (100, 8), (5, 1)])
def test_split_covers_every_step_once_in_order(n, blocks):
    parts = split(list(range(n)), blocks)
    assert [i for p in parts for i in p] == list(range(n))
    assert len(parts) == min(n, blocks) and all(parts)
    assert max(map(len, parts), default=0) - min(map(len, parts), default=0) <= 1


def test_timed_pass_runs_each_step_once_and_blocks_add_up():
    ran, syncs, sampled = [], [], []
    timing = timed_pass(lambda i: ran.append(i) or float(i), list(range(3, 13)), lambda: syncs.append(1),
                        blocks=4, after_step=lambda: sampled.append(1))
    assert ran == list(range(3, 13)) and len(sampled) == 10
    assert len(syncs) == 1 + 4                      # before the pass and at every block edge
    assert timing.units == sum(range(3, 13)) == sum(timing.block_units)
    assert len(timing.block_seconds) == 4 and timing.seconds == pytest.approx(sum(timing.block_seconds))
    assert timing.throughput == pytest.approx(timing.units / timing.seconds)


def test_observer_counts_gc_and_cpu_and_never_fails_without_a_gpu():
    with Observer(torch, torch.device("cpu")) as seen:
        sum(i * i for i in range(200_000))
        gc.collect()
    c = seen.conditions
    assert c["gc_collections"] >= 1 and c["gc_seconds"] >= 0 and c["cpu_seconds"] > 0
    assert c["device_allocs"] is None and c["gpu_clock_mhz"] is None   # no CUDA allocator, no GPU: None
    assert gc.callbacks.count(seen._on_gc) == 0                         # the hook is removed afterwards
    # what the child writes reads back as a typed record, and old records without these fields still read
    m = Measurement.from_json({"peak_reserved_bytes": 2, "peak_allocated_bytes": 1, "conditions": c,
                               "block_seconds": [0.5, 0.5], "some_future_key": 1})
    assert isinstance(m.conditions, Conditions) and m.conditions.gc_collections == c["gc_collections"]
    record = TrialRecord("w", "h", "", 0, "e", "cuda", TrialState.OK, m)
    assert TrialRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    old = Measurement.from_json({"peak_reserved_bytes": 2, "peak_allocated_bytes": 1, "throughput": 3.0})
    assert old.conditions is None and old.block_seconds is None and old.warm_throughput is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_trial_times_a_steady_pass_and_keeps_what_explains_it():
    from alloctune.settings.conf import AllocConf
    from alloctune.trial.launch import run_trial
    from alloctune.trial.task import TrialTask
    from alloctune.workload.loader import load_workload

    spec = load_workload(ROOT / "workloads" / "transformer-varlen.yaml", "tiny")
    record = run_trial(TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "env"), 0)
    assert record.state is TrialState.OK, record.error
    m = record.measurement
    assert m.throughput > 0 and m.warm_throughput > 0 and m.measured_steps == spec.steps
    assert len(m.block_seconds) == min(spec.steps, 8) and sum(m.block_units) == pytest.approx(
        m.throughput * m.measured_seconds)
    c = m.conditions
    assert c.device_allocs is not None and c.gc_collections is not None and c.cpu_seconds > 0
