"""An in-process confirmation's wiring on the CPU, in real processes: the start-up hook hands every counted step to
the alternation (runtime/alternate.py) and writes what it did into the process's report; with no CUDA to switch,
the alternation ends at its first switch (the second block's start: the first runs as the process started) and
the job runs on. And the parent's side: the blocks into the trial's
measurement (trial/inprocess.py). The switching itself needs a GPU: tests/trial/test_alternate_gpu.py."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from alloctune.results.alternation import AlternatedBlock, Alternation, AlternationEnd
from alloctune.results.records import Measurement
from alloctune.runtime.alternate import VARIABLE, AlternatePlan
from alloctune.runtime.peaks import ProcessReport
from alloctune.settings.conf import AllocConf
from alloctune.trial.command import hook_environment, run_command
from alloctune.trial.inprocess import alternated
from alloctune.trial.task import child_environment

TRAIN = """
import sys, torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(int(sys.argv[1])):
    model(torch.randn(4, 8)).square().mean().backward()
    opt.step()
    opt.zero_grad()
print("the loop ended")
"""
PLAN = AlternatePlan("expandable_segments:True", "expandable_segments:False", "", 4, 1, 0.01, 2, 10, 60.0)


def test_the_hook_gives_the_alternation_every_step_and_reports_it_and_a_failed_switch_lets_the_job_run_on(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TRAIN))
    env = hook_environment(child_environment(AllocConf.parse("expandable_segments:True"), None),
                           "expandable_segments:True", warmup_steps=2, early_stop=True)
    run = run_command([sys.executable, str(job), "30"], dict(env, **{VARIABLE: PLAN.to_env()}), None, 120,
                      str(tmp_path / "work"))
    assert run.returncode == 0, Path(run.stderr).read_text()
    assert "the loop ended" in Path(run.stdout).read_text()   # nothing ended it: the switch failed at once
    (report,) = run.processes
    assert report.alternation is not None and report.alternation.end is AlternationEnd.SWITCH_FAILED
    assert report.alternation.note == "CUDA is not initialised" and report.alternation.blocks == []


def test_without_the_variable_a_report_has_no_alternation(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TRAIN))
    env = hook_environment(child_environment(AllocConf(), None), "", warmup_steps=2)
    run = run_command([sys.executable, str(job), "5"], env, None, 120, str(tmp_path / "work"))
    assert run.returncode == 0 and run.processes[0].alternation is None


def blocks(seconds: tuple[float, float]) -> Alternation:
    mine, other = seconds
    return Alternation(against="", block_steps=12, skip_steps=2, target=0.01, end=AlternationEnd.RESOLVED,
                       blocks=[AlternatedBlock(True, 10, mine), AlternatedBlock(False, 10, other),
                               AlternatedBlock(False, 10, other), AlternatedBlock(True, 10, mine)])


def test_the_trials_throughput_is_its_own_blocks_rate_in_the_unit_it_measured():
    # a window of 100 steps in 8 s (12.5 steps/s) measured 1250 tokens/s; the candidate's blocks ran 20 steps in 1 s
    window = Measurement(peak_reserved_bytes=1, peak_allocated_bytes=1, throughput=1250.0, unit="tokens",
                         measured_seconds=8.0, measured_steps=100)
    out = alternated(window, [ProcessReport(pid=1, cuda=True, alternation=blocks((0.5, 0.6)))])
    assert out.throughput == 2000.0 and (out.measured_steps, out.measured_seconds) == (20, 1.0)
    assert out.alternation == blocks((0.5, 0.6))
    assert alternated(window, [ProcessReport(pid=1, cuda=True)]) is window


def test_the_blocks_of_the_first_process_that_timed_any_are_kept():
    failed = Alternation(against="", block_steps=12, skip_steps=2, target=0.01, end=AlternationEnd.SWITCH_FAILED)
    window = Measurement(peak_reserved_bytes=1, peak_allocated_bytes=1)
    out = alternated(window, [ProcessReport(pid=1, cuda=True, rank=0, alternation=failed),
                              ProcessReport(pid=2, cuda=True, rank=1, alternation=blocks((0.5, 0.5)))])
    assert out.alternation == blocks((0.5, 0.5)) and out.throughput is None


def test_the_alternation_waits_for_the_step_of_the_replayed_peak(tmp_path):
    """ALLOCTUNE_HOOK_PEAK_STEP=28 in a 30-step job: its first block would end at step 32, so it never switches
    (the job ends first), where without it the first switch came at step 6 and failed for want of CUDA."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TRAIN))
    env = hook_environment(child_environment(AllocConf.parse("expandable_segments:True"), None),
                           "expandable_segments:True", warmup_steps=2, early_stop=True, peak_step=28)
    assert env["ALLOCTUNE_HOOK_PEAK_STEP"] == "28"
    run = run_command([sys.executable, str(job), "30"], dict(env, **{VARIABLE: PLAN.to_env()}), None, 120,
                      str(tmp_path / "work"))
    assert run.returncode == 0, Path(run.stderr).read_text()
    (report,) = run.processes
    assert report.alternation is not None and report.alternation.end is AlternationEnd.JOB_ENDED
