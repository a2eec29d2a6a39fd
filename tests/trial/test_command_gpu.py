"""Command mode on a real GPU: every CUDA process of a command measured through the start-up hook, OOMs under a
budget, the time limit's SIGTERM, throughput from step marks and from the output, and `record -- CMD` of a
multi-process command replayed rank by rank."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pids import running

from alloctune.results.records import TrialState
from alloctune.sim.trace import load_trace
from alloctune.api.sweep import sweep
from alloctune.workload.command import check_command, command_workload

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20

# Two ranks, each its own Python process, allocating different amounts: rank 1 needs more.
RANKS = """
import os, subprocess, sys
if len(sys.argv) == 1:
    procs = [subprocess.Popen([sys.executable, __file__, str(r)], env=dict(os.environ, RANK=str(r)))
             for r in (0, 1)]
    sys.exit(max(p.wait() for p in procs))
import torch
rank = int(sys.argv[1])
keep = [torch.empty((64 + 128 * rank) * 2**20, dtype=torch.uint8, device="cuda")]
for n in range(1, 40):  # varied sizes, freed as it goes
    x = torch.empty(n * 3 * 2**20 + 4096 * n, dtype=torch.uint8, device="cuda")
    keep.append(x) if n % 3 == 0 else None
    del x
"""


def _script(tmp_path, text: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _sweep(tmp_path, argv, grid, **kw):
    kw.setdefault("backend", "cuda")   # these trials, not a hybrid's recording and replays (auto, for a command)
    metric = kw.pop("metric_regex", None)
    spec = command_workload(check_command(argv, metric_regex=metric))
    return sweep(spec, grid=grid, repeats=1, out=tmp_path / "results", **kw)


def test_every_cuda_process_is_measured_and_the_peak_is_their_maximum(tmp_path):
    job = _script(tmp_path, RANKS)
    outcome = _sweep(tmp_path, [sys.executable, str(job)], ["default", "expandable_segments:True"])
    trials = outcome.folder.trials()
    assert [t.state for t in trials] == [TrialState.OK, TrialState.OK]
    for t in trials:
        assert sorted(p["rank"] for p in t.processes) == [0, 1]
        top = max(t.processes, key=lambda p: p["peak_reserved_bytes"])
        assert top["rank"] == 1 and top["peak_reserved_bytes"] >= 192 * MiB
        assert t.measurement.peak_reserved_bytes == top["peak_reserved_bytes"]
        assert t.measurement.peak_allocated_bytes == max(p["peak_allocated_bytes"] for p in t.processes)
        assert t.measurement.unit == "runs" and t.measurement.throughput == pytest.approx(1 / t.wall_seconds, 0.05)
    assert next(t for t in trials if t.conf).effective_conf == "expandable_segments:True"
    summary = (outcome.folder.path / "summary.md").read_text()
    assert "## Per process" in summary and "rank 1" in summary


def test_oom_under_a_budget_is_an_oom_with_torchs_message(tmp_path):
    job = _script(tmp_path, "import torch\nx = torch.empty(4 * 2**30, dtype=torch.uint8, device='cuda')\n")
    outcome = _sweep(tmp_path, [sys.executable, str(job)], ["default"], budget="1GiB")
    (trial,) = outcome.folder.trials()
    assert trial.state is TrialState.OOM
    assert "OutOfMemoryError" in trial.error and "out of memory" in trial.error.lower()


def test_the_time_limit_kills_the_group_after_the_hook_wrote_the_peaks(tmp_path):
    job = _script(tmp_path, "import os, subprocess, sys, time, torch\n"
                            "open(sys.argv[1], 'w').write(str(subprocess.Popen(['sleep', '600']).pid))\n"
                            "x = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')\ntime.sleep(600)\n")
    pid_file = tmp_path / "child.pid"
    outcome = _sweep(tmp_path, [sys.executable, str(job), str(pid_file)], ["default"], timeout_s=20)
    (trial,) = outcome.folder.trials()
    assert trial.state is TrialState.TIMEOUT and "time limit" in trial.error
    assert trial.processes and trial.processes[0]["peak_reserved_bytes"] >= 256 * MiB
    assert not running(int(pid_file.read_text()))


def test_throughput_from_step_marks_and_from_the_output(tmp_path):
    job = _script(tmp_path, "import time, torch, alloctune\nx = torch.ones(1, device='cuda')\n"
                            "for i in range(12):\n    time.sleep(0.05)\n    alloctune.step(units=10)\n"
                            "    print(f'speed {1000 + i * 10:.1f} it/s', flush=True)\n")
    (steps,) = _sweep(tmp_path / "a", [sys.executable, str(job)], ["default"]).folder.trials()
    assert steps.measurement.unit == "units" and steps.measurement.measured_steps == 10
    assert 120 < steps.measurement.throughput < 205   # 10 units per ~0.05 s
    (regex,) = _sweep(tmp_path / "b", [sys.executable, str(job)], ["default"],
                      metric_regex=r"speed ([\d.]+) it/s").folder.trials()
    assert regex.measurement.throughput == pytest.approx(sum(1000 + i * 10 for i in range(1, 12)) / 11)


def test_record_a_multi_process_command_then_replay_every_rank(tmp_path):
    job = _script(tmp_path, RANKS)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "alloctune", "record", "-o", str(tmp_path / "t.pickle"), "--",
                           sys.executable, str(job)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    traces = [tmp_path / "t.rank0.pickle", tmp_path / "t.rank1.pickle"]
    for path in traces:
        trace = load_trace(path)
        measured = trace.meta["measured"][0]
        assert trace.num_allocs >= 40 and measured["peak_reserved_bytes"] > 0
        assert isinstance(trace.meta["torch_version"], str)
    out = subprocess.run([sys.executable, "-m", "alloctune", "replay", *map(str, traces), "--conf", "default",
                          "--json"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    (top,) = report["maximum"]
    assert top["trace"] == str(traces[1])
    assert top["peak_reserved_bytes"] == pytest.approx(top["measured_peak_reserved_bytes"], rel=0.01)


def test_hybrid_sweep_of_a_command_records_every_rank_and_measures_its_finalist(tmp_path):
    job = _script(tmp_path, RANKS)
    outcome = _sweep(tmp_path, [sys.executable, str(job)], None, backend="hybrid", search=30, finalists=1)
    trials = outcome.folder.trials()
    recording = [t for t in trials if t.recording]
    assert len(recording) == 1 and recording[0].state is TrialState.OK
    folder = outcome.folder.path
    assert outcome.folder.info().trace_paths == ["trace.rank0.xz", "trace.rank1.xz"]
    [trace, _] = [load_trace(folder / name) for name in outcome.folder.info().trace_paths]
    assert trace.meta["rank"] == 0
    # rank 1 allocates more: its trace is the one searched, and every setting is replayed on both
    assert [s["trace"] for s in json.loads((folder / "search.json").read_text()).values()] == ["trace.rank1.xz"]
    assert all(sorted(p["rank"] for p in t.processes) == [0, 1] for t in trials if t.backend == "sim")
    gpu_name = torch.cuda.get_device_properties(0).name
    assert trace.meta["env"] == {"gpu": gpu_name, "torch": torch.__version__}   # the simulated section names them
    assert f"Replayed from a trace recorded on {gpu_name} with torch {torch.__version__}" in \
        (outcome.folder.path / "summary.md").read_text()
    gpu = [t for t in trials if t.backend == "cuda" and not t.recording]
    predicted = {t.conf: t.measurement.peak_reserved_bytes for t in trials if t.backend == "sim"}
    assert "" in {t.conf for t in gpu} and len({t.conf for t in gpu}) <= 2   # the default and a finalist
    for t in gpu:
        assert sorted(p["rank"] for p in t.processes) == [0, 1]
        assert t.measurement.peak_reserved_bytes == pytest.approx(predicted[t.conf], rel=0.01)
