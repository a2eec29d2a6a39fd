"""An in-process confirmation on a real GPU (runtime/alternate.py under the start-up hook): torch takes each
switch at run time (read back after every one), the blocks come back timed, the process ends at the stop the
alternation agreed on with the setting it started under in force, and a trial of it is a record whose
measurement carries the blocks. The CPU side: tests/trial/test_alternate_hook.py, tests/runtime/test_alternate.py."""
from __future__ import annotations

import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from alloctune.results.alternation import AlternationEnd
from alloctune.results.records import TrialState
from alloctune.runtime.alternate import VARIABLE, AlternatePlan
from alloctune.settings.conf import AllocConf
from alloctune.settings.switching import switch_strings
from alloctune.trial.command import hook_environment, run_command, run_command_trial
from alloctune.trial.task import TrialTask, child_environment
from alloctune.workload.command import check_command, command_workload

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# Variable shapes, so that each setting lays its segments out its own way.
TRAIN = """
import sys, torch
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters())
for i in range(int(sys.argv[1])):
    x = torch.randn(64 * (1 + i % 4), 1024, device="cuda")
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
print("the loop ended")
"""


def plan(conf: str, **kw) -> AlternatePlan:
    strings = switch_strings(AllocConf.parse(conf), AllocConf(), torch.__version__)
    assert strings is not None
    fields = dict(candidate=strings[0], against=strings[1], against_conf="", block_steps=8, skip_steps=2,
                  target=0.5, min_pairs=3, max_pairs=4, max_seconds=60.0)
    return AlternatePlan(**{**fields, **kw})


@pytest.mark.parametrize("conf", ["expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"])
def test_every_switch_takes_and_the_process_ends_at_the_agreed_stop_under_its_own_setting(tmp_path, conf):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TRAIN))
    env = hook_environment(child_environment(AllocConf.parse(conf), None), conf, warmup_steps=2, early_stop=True)
    run = run_command([sys.executable, str(job), "2000"], dict(env, **{VARIABLE: plan(conf).to_env()}), None, 300,
                      str(tmp_path / "work"))
    assert run.returncode == 0, Path(run.stderr).read_text()
    assert "the loop ended" not in Path(run.stdout).read_text()
    (report,) = run.processes
    a = report.alternation
    assert a is not None and a.end in (AlternationEnd.RESOLVED, AlternationEnd.MAX_PAIRS), a
    assert 6 <= len(a.blocks) <= 8 and [b.candidate for b in a.blocks[:4]] == [True, False, False, True]
    assert all(b.steps == 6 and b.seconds > 0 for b in a.blocks)
    assert report.mismatch is None and report.window_ended and report.auto_window
    assert report.devices and report.devices[0].peak_reserved_bytes > 0


def test_a_trial_that_alternates_records_its_blocks_and_its_own_rate(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(TRAIN))
    conf = "expandable_segments:True"
    spec = command_workload(check_command([sys.executable, str(job), "2000"]), warmup_steps=2)
    task = TrialTask(workload=spec.to_dict(), workload_hash=spec.digest(), conf=AllocConf.parse(conf), repeat=0,
                     python=sys.executable, env_id="t", timeout_s=300)
    record = run_command_trial(replace(task, early_stop=True, alternate=plan(conf).to_env()))
    assert record.state is TrialState.OK, record.error
    m = record.measurement
    assert m is not None and m.alternation is not None and len(m.alternation.blocks) >= 6
    mine = [b for b in m.alternation.blocks if b.candidate]
    assert m.measured_steps == sum(b.steps for b in mine) and m.throughput is not None and m.throughput > 0
