"""`alloctune record` without a GPU: what can be checked here for real (the injected start-up hook chains to the
user's own sitecustomize, and failures are clear); recording itself is checked on the GPU (marked gpu)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from alloctune.errors import AlloctuneError
from alloctune.sim.trace import load_trace
from alloctune.trial.recording import record_command, record_workload

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.usefixtures("no_visible_gpu")   # checks the no-GPU path, on any machine
def test_user_command_runs_with_their_own_sitecustomize_and_fails_clearly_without_cuda(tmp_path, monkeypatch):
    theirs = tmp_path / "site"
    theirs.mkdir()
    marker = tmp_path / "their-sitecustomize-ran"
    (theirs / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))
    program = "import os, sys; sys.exit(0 if os.environ.get('ALLOCTUNE_HOOK_OUT') else 3)"  # the hook is on
    # Through a shell, whose interpreter alloctune cannot tell: the command runs and says it recorded nothing.
    with pytest.raises(AlloctuneError, match="exited with status 0 and recorded no trace"):
        record_command(["/bin/sh", "-c", 'exec "$0" -c "$1"', sys.executable, program], tmp_path / "t.xz")
    assert marker.read_text() == "yes"  # the user's sitecustomize still ran
    assert not (tmp_path / "t.xz").exists()


@pytest.mark.usefixtures("no_visible_gpu")   # checks the no-GPU path, on any machine
def test_recording_a_workload_needs_a_gpu(tmp_path):
    with pytest.raises(AlloctuneError, match="recording needs a CUDA GPU"):
        record_workload(ROOT / "workloads" / "transformer-varlen.yaml", tmp_path / "t.xz", preset="tiny")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_record_workload_and_command_on_the_gpu(tmp_path):
    trace = record_workload(ROOT / "workloads" / "transformer-varlen.yaml", tmp_path / "t.xz", preset="tiny")
    assert trace.num_allocs > 0 and trace.meta["measured"][0]["peak_reserved_bytes"] > 0
    assert load_trace(tmp_path / "t.xz").kinds == trace.kinds
    # the tiny preset's 1 + 3 steps, placed among the events by time: each step allocates
    ends = load_trace(tmp_path / "t.xz").meta["step_ends"]
    assert len(ends) == 4 and 0 < ends[0] < ends[1] < ends[2] < ends[3] <= len(trace)
    assert trace.meta["warmup_steps"] == 1
    script = tmp_path / "job.py"
    script.write_text("import torch\nx = [torch.empty(2**20 * n, device='cuda') for n in (1, 3, 5)]\ndel x\n")
    ((path, env_trace),) = record_command([sys.executable, str(script)], tmp_path / "job.pickle")
    assert path == tmp_path / "job.pickle" and env_trace.num_allocs >= 3
    assert isinstance(env_trace.meta["torch_version"], str)   # plain: the loader admits no class
    assert subprocess.run([sys.executable, "-m", "alloctune", "replay", str(tmp_path / "job.pickle"), "--json"],
                          capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT))).returncode == 0


def _record_cli(*args) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alloctune", "record", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600)


@pytest.mark.usefixtures("no_visible_gpu")   # checks the no-GPU path, on any machine
def test_record_json_without_a_gpu_is_the_same_one_line(tmp_path):
    run = _record_cli("--json", "-o", tmp_path / "t.xz", ROOT / "workloads" / "transformer-varlen.yaml",
                      "--preset", "tiny")
    assert run.returncode == 2 and not run.stdout and run.stderr.count("\n") == 1, run
    assert "recording needs a CUDA GPU" in run.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("no_visible_gpu")   # checks the no-GPU path, on any machine
def test_recording_a_python_command_without_a_gpu_is_refused_before_it_runs(tmp_path):
    """Its interpreter is probed first, as for a workload: a command that sees no GPU is not run (it may take
    hours) only to record nothing. Named directly, or by the `#!` line of a script (torchrun, a console script)."""
    ran = tmp_path / "ran"
    script = tmp_path / "train"
    script.write_text(f"#!{sys.executable}\nopen({str(ran)!r}, 'w').write('yes')\n")
    script.chmod(0o755)
    for command in ([sys.executable, "-c", f"open({str(ran)!r}, 'w').write('yes')"], [str(script)]):
        run = _record_cli("-o", tmp_path / "t.pickle", "--", *command)
        assert run.returncode == 2 and not run.stdout and run.stderr.count("\n") == 1, run
        assert "recording needs a CUDA GPU" in run.stderr and not ran.exists()
    assert not (tmp_path / "t.pickle").exists()


def test_recording_with_an_interpreter_without_torch_is_refused_before_it_runs(tmp_path):
    """As a sweep refuses it, in the same words: the command is not run only to record nothing."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python, ran = venv / "bin" / "python", tmp_path / "ran"
    run = _record_cli("-o", tmp_path / "t.pickle", "--", python, "-c", f"open({str(ran)!r}, 'w').write('yes')")
    assert run.returncode == 2 and not run.stdout and run.stderr.count("\n") == 1, run
    assert f"{python} cannot import torch (ModuleNotFoundError" in run.stderr and not ran.exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_record_json_lists_the_traces_written(tmp_path):
    run = _record_cli("--json", "-o", tmp_path / "t.xz", ROOT / "workloads" / "transformer-varlen.yaml",
                      "--preset", "tiny")
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(run.stdout)
    trace = load_trace(row["trace"])
    assert row["events"] == len(trace.kinds) and row["allocations"] == trace.num_allocs > 0
    assert row["measured"]["peak_reserved_bytes"] > 0
