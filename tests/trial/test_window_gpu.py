"""The start-up hook's steps, window, device memory and budget on a real GPU: what the CPU build cannot show
(tests/trial/test_window.py is the CPU side). A synchronised window whose peak is read at 80% and at its end;
growth samples; the per-process NVML figure that leaves a neighbour's memory out; the budget set and read back on
the device a process uses, and only there (two GPUs: skipped with fewer); torchrun ranks over NCCL stopping
together; `record -- CMD --steps`."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from alloctune.results.records import DeviceMemorySource, ThroughputSource, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.sim.trace import load_trace
from alloctune.trial.command import hook_environment, run_command, run_command_trial
from alloctune.trial.task import TrialTask, child_environment
from alloctune.workload.command import check_command, command_workload

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20

try:
    import pynvml  # noqa: F401  (nvidia-ml-py: torch's NVML handle needs it)
    NVML = True
except ImportError:
    NVML = False

# A training loop on the GPU; with GROW set, each step from step GROW on keeps a larger tensor alive.
TRAIN = """
import os, sys, torch
model = torch.nn.Linear(1024, 1024, device="cuda")
opt = torch.optim.AdamW(model.parameters())
grow, keep = int(os.environ.get("GROW", "0")), []
for i in range(int(sys.argv[1])):
    loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if grow and i + 1 >= grow:
        keep.append(torch.empty((i + 1) * 4 * 2**20, dtype=torch.uint8, device="cuda"))
print("the loop ended")
"""


def _script(tmp_path, text, name="job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _budgets(proc) -> list[tuple[int, float]]:
    """(device, fraction) of each budget the hook set, each read back as set (to the float's precision)."""
    assert all(b.read_back == pytest.approx(b.fraction, rel=1e-6) for b in proc.budgets), proc.budgets
    return sorted((b.device, b.fraction) for b in proc.budgets)


def _trial(tmp_path, argv, steps=0, env=None, budget=None):
    spec = command_workload(check_command(argv, env=env), warmup_steps=2, steps=steps)
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "torch-gpu",
                     timeout_s=300, budget_fraction=budget)
    return run_command_trial(task, 0)


def _run(tmp_path, argv, work="work", env=None, **hook):
    base = child_environment(AllocConf.parse(""), None, dict(os.environ, **(env or {})))
    return run_command(argv, hook_environment(base, "", **hook), None, 300, str(tmp_path / work))


def test_a_window_on_the_gpu_is_ok_synchronised_and_says_whether_its_peak_still_rose(tmp_path):
    job = _script(tmp_path, TRAIN)
    steady = _trial(tmp_path, [sys.executable, str(job), "500"], steps=20)
    assert steady.state is TrialState.OK, steady.error
    m = steady.measurement
    assert m.ended_by_window and m.throughput_source is ThroughputSource.OPTIMIZER_STEPS
    assert m.measured_steps == 20 and m.throughput > 0 and m.peak_rising is False
    rising = _trial(tmp_path, [sys.executable, str(job), "500"], steps=20, env={"GROW": "19"})
    assert rising.state is TrialState.OK and rising.measurement.peak_rising is True


def test_the_counted_window_is_synchronised_at_both_ends(tmp_path):
    job = _script(tmp_path, TRAIN)
    run = _run(tmp_path, [sys.executable, str(job), "500"], warmup_steps=2, window_steps=10)
    assert run.returncode == 0 and "the loop ended" not in Path(run.stdout).read_text()
    (proc,) = run.processes
    (count,) = proc.counted
    assert count.count == 12 and count.start < count.last <= count.end
    assert proc.window_reserved[1] >= proc.window_reserved[0] > 0


def test_growth_samples_at_k_and_2k(tmp_path):
    job = _script(tmp_path, TRAIN)
    run = _run(tmp_path, [sys.executable, str(job), "20"], env={"GROW": "5"}, growth_steps=4)
    (proc,) = run.processes
    (first, second) = proc.growth_samples
    assert first[0] == 4 and second[0] == 8
    assert second[1] > first[1] and all(row[1] >= row[2] > 0 for row in (first, second))


@pytest.mark.skipif(not NVML, reason="needs nvidia-ml-py")
def test_device_memory_is_the_processs_own_and_leaves_a_neighbour_out(tmp_path):
    """A neighbour holds 2 GiB on the same GPU for the whole trial: the trial's device figure is its own."""
    neighbour = subprocess.Popen([sys.executable, "-c", "import sys, time, torch\n"
                                  "x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda')\n"
                                  "print('ready', flush=True)\ntime.sleep(600)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert neighbour.stdout.readline().strip() == "ready"
        job = _script(tmp_path, "import torch\nx = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')\n"
                                "import time; time.sleep(0.5)\n")
        record = _trial(tmp_path, [sys.executable, str(job)])
    finally:
        neighbour.kill()
        neighbour.wait()
    m = record.measurement
    assert record.state is TrialState.OK and m.device_memory_source in (DeviceMemorySource.NVML,
                                                                        DeviceMemorySource.BASELINE)
    assert m.peak_reserved_bytes <= m.device_peak_used_bytes < 2 * 2**30   # context and libraries, no neighbour
    assert 0 < m.overhead_bytes < 2 * 2**30
    assert record.processes[0]["device_memory_source"] == str(m.device_memory_source)


def test_the_budget_on_one_gpu_is_set_before_the_first_allocation_and_read_back(tmp_path):
    job = _script(tmp_path, "import torch\nx = torch.empty(64 * 2**20, dtype=torch.uint8, device='cuda')\n")
    run = _run(tmp_path, [sys.executable, str(job)], env={"CUDA_VISIBLE_DEVICES": os.environ.get(
        "CUDA_VISIBLE_DEVICES", "0").split(",")[0]}, budget_fraction=0.5)
    (proc,) = run.processes
    assert _budgets(proc) == [(0, 0.5)]
    record = _trial(tmp_path, [sys.executable, "-c", "import torch\n"
                               "x = torch.empty(int(0.6 * torch.cuda.get_device_properties(0).total_memory), "
                               "dtype=torch.uint8, device='cuda')\n"], budget=0.5)
    assert record.state is TrialState.OOM


@two_gpus
@pytest.mark.skipif(not NVML, reason="needs nvidia-ml-py")
def test_a_process_that_sees_two_gpus_gets_the_budget_only_where_it_works(tmp_path):
    """It sets GPU 1 as its device (as a rank of a job that sees every GPU does): GPU 0 gets neither a budget
    nor a context from alloctune."""
    job = _script(tmp_path, """
        import os, time, torch
        torch.cuda.set_device(1)
        x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        time.sleep(0.3)
        handle = torch.cuda._get_pynvml_handler(0)
        on_gpu0 = [p.pid for p in torch.cuda.pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        print("context on gpu 0:", os.getpid() in on_gpu0)
        """)
    run = _run(tmp_path, [sys.executable, str(job)], env={"CUDA_VISIBLE_DEVICES": "0,1"}, budget_fraction=0.5)
    assert run.returncode == 0, Path(run.stderr).read_text()
    assert "context on gpu 0: False" in Path(run.stdout).read_text()
    (proc,) = run.processes
    assert _budgets(proc) == [(1, 0.5)] and [d.device for d in proc.devices] == [1]


@two_gpus
def test_a_process_that_uses_both_gpus_gets_the_budget_on_both_and_it_reads_back(tmp_path):
    job = _script(tmp_path, """
        import time, torch
        a = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda:0")
        b = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda:1")
        time.sleep(0.5)   # the sampler sets the budget on a device it sees allocated on
        print([round(torch.cuda.get_per_process_memory_fraction(i), 3) for i in (0, 1)])
        """)
    run = _run(tmp_path, [sys.executable, str(job)], env={"CUDA_VISIBLE_DEVICES": "0,1"}, budget_fraction=0.25)
    assert run.returncode == 0, Path(run.stderr).read_text()
    assert "[0.25, 0.25]" in Path(run.stdout).read_text()
    (proc,) = run.processes
    assert _budgets(proc) == [(0, 0.25), (1, 0.25)]


@two_gpus
def test_torchrun_ranks_over_nccl_stop_together_and_each_ranks_memory_is_its_own(tmp_path):
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv = [torchrun, "--standalone", "--nproc-per-node", "2", str(ROOT / "examples" / "ddp_train.py"), "--steps",
            "200", "--layers", "2", "--d-model", "256", "--vocab", "4000", "--log-every", "0"]
    spec = command_workload(check_command(argv), warmup_steps=3, steps=10)
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "torch-gpu",
                     timeout_s=300)
    record = run_command_trial(task, (0, 1))
    assert record.state is TrialState.OK, record.error
    assert record.measurement.ended_by_window and record.measurement.measured_steps == 10
    assert sorted((p["rank"], p["device"]) for p in record.processes) == [(0, 0), (1, 1)]
    assert "nccl" in record.features
    if NVML:
        assert {p["device_memory_source"] for p in record.processes} <= {"nvml", "baseline"}


def test_record_a_command_over_a_window(tmp_path):
    job = _script(tmp_path, TRAIN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "alloctune", "record", "-o", str(tmp_path / "t.pickle"), "--steps",
                           "5", "--", sys.executable, str(job), "100000"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 120 and "the loop ended" not in done.stdout
    trace = load_trace(tmp_path / "t.pickle")
    assert trace.num_allocs > 0 and trace.meta["measured"][0]["peak_reserved_bytes"] > 0
