"""`sweep -- CMD` as a user runs it on a GPU, without one: a stand-in interpreter answers the probe as a one-GPU
machine and runs the user's command as the start-up hook would report it: per-process peaks (the shipped
transformer-packed H200 trace replayed under the setting it was given), step marks at a chosen rate with ±0.5%
noise, and the recorded trace where the hook is asked to record one. The sweep, its replays, its rounds and its
statistics are the real ones: these tests count the GPU trials a sweep needs."""
from __future__ import annotations

import json
import stat
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import alloctune
from alloctune.decide.reasons import Code
from alloctune.results.records import Backend
from alloctune.workload.command import check_command, command_workload

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
ES = "expandable_segments:True"
ASYNC = "backend:cudaMallocAsync"
MiB = 2**20

# The stand-in Python. Probe calls: one GPU (parsing settings goes to the real torch). Anything else is the user's
# command: it logs the setting it got ('R' marks a recording run) and writes what the hook would, for one process.
# cudaMallocAsync's pool is taken as 6% above the program's live bytes and its context 70 MiB larger than the
# native allocator's (both as on the H200, results/transformer-packed-h200-20261129-234801).
PYTHON = """
import importlib.metadata, json, os, random, shutil, sys, time
if sys.argv[1:4] == ["-m", "alloctune.trial.probe", "probe"]:
    sys.stdin.read()
    print("ALLOCTUNE-PROBE " + json.dumps(dict(
        python=sys.argv[0], python_version="3", torch_version={torch!r}, torch_git=None, cuda_version="12",
        cuda_available=True, device_count=1, devices=[dict(index=0, name="fake", total_memory=143 * 2**30)],
        driver="1", host="h", env_id="torch-gpu")))
    sys.exit(0)
if sys.argv[1:3] == ["-m", "alloctune.trial.probe"]:
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
from alloctune.sim.replay import replay
from alloctune.sim.trace import load_trace
conf, out = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), os.environ["ALLOCTUNE_HOOK_OUT"]
recording = os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1"
with open({log!r}, "a") as f:
    f.write(("R" if recording else "") + conf + "\\n")
runs = len(open({log!r}).read().splitlines())
plan = json.loads({plan!r})
trace = load_trace({trace!r})
[outcome] = replay(trace, ["" if "cudaMallocAsync" in conf else conf], int(trace.meta["device_total_bytes"]),
                   jobs=1, torch_version=importlib.metadata.version("torch"))
m = outcome.measurement()
reserved, context = m.peak_reserved_bytes, 782 * 2**20
if "cudaMallocAsync" in conf:
    reserved, context = int(m.peak_requested_bytes * 1.06), 852 * 2**20
device = dict(device=0, peak_reserved_bytes=reserved, peak_allocated_bytes=m.peak_allocated_bytes,
              peak_requested_bytes=m.peak_requested_bytes, num_alloc_retries=0, num_ooms=0,
              device_peak_used_bytes=reserved + context)
rate = plan["rate"] * plan["factors"].get(conf, 1.0) * (1 + random.Random(runs).uniform(-0.005, 0.005))
t0 = time.perf_counter()
steps = [[t0 + i / rate, 1.0] for i in range(12)]
if recording:
    shutil.copy({trace!r}, os.path.join(out, f"trace-{{os.getpid()}}.pickle"))
json.dump(dict(pid=os.getpid(), rank=None, cuda=True, torch_version=importlib.metadata.version("torch"),
               effective_conf=conf, devices=[device], steps=steps),
          open(os.path.join(out, f"proc-{{os.getpid()}}.json"), "w"))
"""


def command_sweep(tmp_path: Path, factors: dict | None = None, **kw) -> tuple[alloctune.SweepOutcome, list[str]]:
    """`sweep -- python3 job.py` of the default grid on the stand-in GPU; what ran, in order."""
    log = tmp_path / "ran.log"
    (tmp_path / "bin").mkdir(exist_ok=True)
    python = tmp_path / "bin" / "python3"   # a name that says Python: the command runs under it
    plan = json.dumps({"rate": 50.0, "factors": factors or {}})
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(
        PYTHON.format(torch=torch.__version__, python=sys.executable, trace=str(TRACE), log=str(log), plan=plan)))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    job = tmp_path / "job.py"
    job.write_text("# run by the stand-in\n")
    spec = command_workload(check_command([str(python), str(job)]), name="job")
    outcome = alloctune.sweep(spec, out=tmp_path / "out", timeout_s=120, **kw)
    return outcome, log.read_text().splitlines()


def gpu_trials(outcome) -> list:
    return [t for t in outcome.folder.trials() if t.backend == Backend.CUDA]


def test_a_command_sweep_of_the_default_grid_takes_eight_trials(tmp_path):
    outcome, ran = command_sweep(tmp_path)
    print(ran)
    assert len(gpu_trials(outcome)) == len(ran) <= 8
