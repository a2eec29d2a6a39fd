"""A whole hybrid sweep (`sweep --backend hybrid`, no --trace) without a GPU: a stand-in interpreter answers the
probe as a one-GPU machine and runs trials as the trial child would, copying a shipped H200 trace where it is asked
to record one; the replays, the finalists and the statistics are the real ones. The trial that recorded the trace
is the default's repeat 0: it is not run again, it counts, and resuming runs nothing twice."""
from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import alloctune
from alloctune.decide.rounds import MIN_ROUNDS
from alloctune.results.records import TrialRecord
from standin import PROBE_AS_ONE_GPU

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
ES = "expandable_segments:True"
GiB = 2**30

# The stand-in: probes as one GPU (tests/standin.py: other probe calls go to the real torch); a trial logs
# its setting ('R' marks the recording one) and answers with peaks per setting and a throughput per run.
PYTHON = """
import json, os, shutil, sys
""" + PROBE_AS_ONE_GPU + """
spec = json.load(open(sys.argv[3]))
if spec["record_trace"]:
    shutil.copy({trace!r}, spec["record_trace"])
with open({log!r}, "a") as f:
    f.write(("R" if spec["record_trace"] else "") + spec["conf"] + "\\n")
runs = len(open({log!r}).read().splitlines())
gib = 27 if spec["conf"] else 40
json.dump({{"state": "ok", "env": {{}}, "measurement": {{
    "peak_reserved_bytes": gib * 2**30, "peak_allocated_bytes": 26 * 2**30,
    "throughput": 100.0 + runs, "unit": "tokens"}}}}, open(spec["result"], "w"))
"""


def hybrid(tmp_path: Path, repeats: int | str, **kw) -> tuple[alloctune.SweepOutcome, list[str]]:
    """A hybrid sweep of ES on the stand-in GPU, into tmp_path/out (resumed if there); the settings run so far."""
    log = tmp_path / "ran.log"
    python = tmp_path / "gpu-python"
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(
        PYTHON.format(torch=torch.__version__, python=sys.executable, trace=str(TRACE), log=str(log))))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    workload = tmp_path / "w.yaml"
    workload.write_text("name: w\nkind: hpsearch\nunit: tokens\nsteps: 1\n")
    outcome = alloctune.sweep(workload, grid=[ES], pythons=[str(python)], backend="hybrid", repeats=repeats,
                              finalists=1, out=tmp_path / "out", timeout_s=60, **kw)
    return outcome, log.read_text().splitlines()


def measured(outcome) -> list[TrialRecord]:
    return [t for t in outcome.folder.trials() if t.backend == "cuda"]


@pytest.mark.slow
def test_the_recording_trial_is_the_defaults_first_repeat(tmp_path):
    outcome, ran = hybrid(tmp_path, 1)
    assert ran == ["R", ES]   # two GPU trials: the recording default and the finalist
    [default, finalist] = [s for s in outcome.settings if s.backend == "cuda"]
    assert default.conf == "" and [t.recording for t in default.trials] == [True]
    assert default.peak_reserved_bytes == 40 * GiB and default.throughput.median == 101.0
    assert finalist.conf == ES and finalist.vs_default.ratio == 102.0 / 101.0
    [choice] = [c for c in outcome.choices if c.backend == "cuda"]
    assert choice.trials_recorded == 2 and choice.trials_planned is None
    summary = (outcome.folder.path / "summary.md").read_text()
    assert "counts as its repeat 1" in summary
    # resumed: nothing runs again, not even the default's repeat 0
    again, ran = hybrid(tmp_path, 1)
    assert ran == ["R", ES] and len(measured(again)) == 2


def test_with_repeats_the_default_runs_that_many_trials_in_all(tmp_path):
    outcome, ran = hybrid(tmp_path, 2)
    assert ran == ["R", ES, "", ES]
    default = next(s for s in outcome.settings if s.backend == "cuda" and not s.conf)
    assert [(t.repeat, t.recording) for t in default.trials] == [(0, True), (1, False)]
    assert [t.measurement.throughput for t in default.trials] == [101.0, 103.0]
    # the finalist's round 0 sits between the recording default and repeat 1: the replays in between do not count
    # in the run order, so its baseline is interpolated halfway (log-linearly) between 101 and 103
    es = next(s for s in outcome.settings if s.backend == "cuda" and s.conf == ES)
    assert es.pairs[0] == (pytest.approx((101.0 * 103.0) ** 0.5), 102.0)


@pytest.mark.slow
def test_auto_repeats_open_the_first_round_with_the_recording_trial(tmp_path):
    outcome, ran = hybrid(tmp_path, "auto", max_repeats=MIN_ROUNDS)
    assert ran[:2] == ["R", ES] and ran.count("R") == 1
    defaults = [t for t in measured(outcome) if not t.conf]
    assert sorted(t.repeat for t in defaults) == list(range(len(defaults)))   # one trial per repeat
    assert [t.recording for t in defaults if t.repeat == 0] == [True]
    assert len(defaults) == ran.count("R") + ran.count("")

