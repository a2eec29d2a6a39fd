"""`sweep --executor ray` through a real local Ray instance (CPU only, declaring two GPUs), against the local
executor and the simulator.

No GPU here, so trials run under a stand-in interpreter (`STANDIN`): its probe answers as this torch would beside
two GPUs, and its trial child reports the figures of the workload's recorded allocation trace replayed under the
trial's setting through alloctune's simulator (the `peaks` fixture), so every trial has real, repeatable figures.
Everything around it is the real thing: the Ray tasks, the runner's fresh child process and its read-back, the
driver's trials file, selection. Each stand-in child also reports its pid, parent, CUDA_VISIBLE_DEVICES and when it
ran.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pids import hear_ctrl_c, processes_hear_ctrl_c, running
from waiting import wait_until

import alloctune
from alloctune.errors import AlloctuneError
from alloctune.results.records import TrialState
from alloctune.results.trials import TrialStore
from alloctune.settings.conf import AllocConf
from alloctune.sim.replay import replay
from alloctune.sim.trace import load_trace

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow   # every test here is a sweep end to end

ROOT = Path(__file__).resolve().parents[2]
PACKED = ROOT / "workloads" / "transformer-packed.yaml"
TRACE = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
GRID = ["default", "expandable_segments:True", "max_split_size_mb:128"]
GPU = "Stand-in GPU"

STANDIN = '''\
#!{python}
import importlib.metadata, json, os, signal, sys, time
STATE, PEAKS, GPU = {state!r}, {peaks!r}, {gpu!r}
if sys.argv[1] != "-m":  # a script: run it as python would
    import runpy
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    sys.exit(0)
if sys.argv[2] == "alloctune.child.probe":
    if sys.argv[3] == "probe":
        import types, torch
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0,1").split(",")
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: len(visible)
        torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(name=GPU, total_memory=143771 << 20)
    import runpy
    sys.executable, sys.argv = sys.argv[0], [sys.argv[0], *sys.argv[3:]]  # trials run under this stand-in
    runpy.run_module("alloctune.child.probe", run_name="__main__")
    sys.exit(0)
start = time.time()
spec = json.load(open(sys.argv[3]))
kills = os.path.join(STATE, "kill-" + (spec["conf"] or "default"))  # kill the Ray worker running us this often
if os.path.exists(kills):
    left = int(open(kills).read())
    os.remove(kills) if left <= 1 else open(kills, "w").write(str(left - 1))
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(1)
if os.path.exists(os.path.join(STATE, "hang")):
    open(os.path.join(STATE, "child.dir"), "w").write(os.path.dirname(sys.argv[3]))   # the trial's folder
    open(os.path.join(STATE, "child.pid"), "w").write(str(os.getpid()))
    time.sleep(600)
torch_version = importlib.metadata.version("torch")
m = json.load(open(PEAKS))[spec["conf"]]
time.sleep(0.3)  # hold the "GPU" a moment: trials sharing one would overlap in time
other = os.path.join(STATE, "gpu-" + (spec["conf"] or "default"))  # this trial "runs on" another GPU model
env = dict(torch=torch_version, gpu=open(other).read() if os.path.exists(other) else GPU, pid=os.getpid(),
           ppid=os.getppid(), start=start, end=time.time(), cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
           cwd=os.getcwd())
json.dump(dict(state="oom" if m["num_ooms"] else "ok", measurement=m, effective_conf=spec["conf"], env=env),
          open(spec["result"], "w"))
'''


@pytest.fixture(scope="module")
def peaks(tmp_path_factory) -> str:
    """A file of the trace's figures replayed under each setting of GRID (no budget: no test here gives one), as the
    trials' own torch would, by setting: what the stand-in's trials report."""
    trace = load_trace(TRACE)
    confs = [str(AllocConf.parse(c)) for c in GRID]
    outcomes = replay(trace, confs, int(trace.meta["device_total_bytes"]), jobs=1,
                      torch_version=importlib.metadata.version("torch"))
    path = tmp_path_factory.mktemp("peaks") / "peaks.json"
    path.write_text(json.dumps({conf: dataclasses.asdict(o.measurement()) for conf, o in zip(confs, outcomes)}))
    return str(path)


@pytest.fixture(scope="module")
def cluster():
    """One local Ray for the module: two CPUs, and two GPUs it declares (there are none), of a model it names (as
    Ray does for a real GPU node): trials ask for that model."""
    with processes_hear_ctrl_c():   # Ray's processes, which a cancelled task is interrupted in
        ray.init(address="local", num_cpus=2, num_gpus=2, resources={"accelerator_type:H200": 1},
                 include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


# A user's command as the start-up hook would report it from a GPU process: its peaks (the trace replayed under the
# setting it was given: `peaks`) in the hook's per-process file.
JOB = '''\
import importlib.metadata, json, os
conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
m = json.load(open({peaks!r}))[conf]
device = dict(device=0, peak_reserved_bytes=m["peak_reserved_bytes"], peak_allocated_bytes=m["peak_allocated_bytes"],
              num_alloc_retries=m["num_alloc_retries"], num_ooms=m["num_ooms"])
json.dump(dict(pid=os.getpid(), rank=None, cuda=True, torch_version=importlib.metadata.version("torch"),
               effective_conf=conf, devices=[device], cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES")),
          open(os.path.join(os.environ["ALLOCTUNE_HOOK_OUT"], f"proc-{{os.getpid()}}.json"), "w"))
'''


@pytest.fixture
def standin(tmp_path, peaks):
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "bin").mkdir()
    path = tmp_path / "bin" / "python3"  # a name that says Python: a command starting with it runs under it
    path.write_text(STANDIN.format(python=sys.executable, state=str(state), peaks=peaks, gpu=GPU))
    path.chmod(0o755)
    return str(path), state


def run(tmp_path, name, python, **kw):
    kw.setdefault("backend", "cuda")
    notices: list[str] = []
    outcome = alloctune.sweep(PACKED, preset="h200", grid=GRID, pythons=[python], results_root=tmp_path / name,
                              notice=notices.append, **kw)
    return outcome, notices


def figures(outcome) -> dict:
    return {(r.conf, r.repeat): (r.state, r.measurement.peak_reserved_bytes, r.measurement.peak_allocated_bytes)
            for r in outcome.folder.trials()}


def test_ray_sweep_gets_the_local_trials_and_choice_on_the_gpus_ray_assigned(cluster, standin, tmp_path,
                                                                             monkeypatch):
    python, _ = standin
    local, _ = run(tmp_path, "local", python, repeats=2, gpus=[0, 1])
    monkeypatch.chdir(tmp_path)  # Ray's workers started elsewhere: trials still start where the sweep was typed
    on_ray, _ = run(tmp_path, "ray", python, repeats=2, executor="ray")
    simulated, _ = run(tmp_path, "sim", python, backend="sim")

    assert figures(on_ray) == figures(local) and len(figures(on_ray)) == 6
    assert all(state is TrialState.OK for state, _, _ in figures(on_ray).values())
    assert [c.best.conf for c in on_ray.choices] == [c.best.conf for c in local.choices] == ["expandable_segments:True"]
    # The trials' figures are the simulator's own: the same peaks as the simulator executor's records.
    sim_peaks = {r.conf: r.measurement.peak_reserved_bytes for r in simulated.folder.trials()}
    assert {conf: peak for (conf, _), (_, peak, _) in figures(on_ray).items()} == sim_peaks

    records = on_ray.folder.trials()
    assert all(r.node == socket.gethostname() and r.retried is None and r.env["cwd"] == str(tmp_path)
               for r in records)
    # A fresh process each, holding exactly the GPU Ray assigned to its task...
    assert len({r.env["pid"] for r in records}) == len(records)
    assert all(r.gpus in ("0", "1") and r.env["cuda_visible_devices"] == r.gpus for r in records)
    # ...and never a GPU that another trial held at the same time.
    for gpu in ("0", "1"):
        spans = sorted((r.env["start"], r.env["end"]) for r in records if r.gpus == gpu)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))
    # The local executor's records say where they ran too.
    assert {r.gpus for r in local.folder.trials()} == {"0", "1"}


def test_a_trial_asking_for_two_gpus_holds_both_alone(cluster, standin, tmp_path):
    python, _ = standin
    outcome, _ = run(tmp_path, "ray", python, repeats=1, executor="ray", gpus_per_trial=2)
    records = outcome.folder.trials()
    assert len(records) == 3 and all(r.state is TrialState.OK for r in records)
    assert all(sorted(r.gpus.split(",")) == ["0", "1"] and r.env["cuda_visible_devices"] == r.gpus for r in records)
    spans = sorted((r.env["start"], r.env["end"]) for r in records)  # both GPUs each: one trial at a time
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_a_command_sweeps_on_ray_as_it_does_locally(cluster, standin, peaks, tmp_path):
    from alloctune.workload.command import check_command, command_workload

    python, _ = standin
    job = tmp_path / "job.py"
    job.write_text(JOB.format(peaks=peaks))
    spec = command_workload(check_command([python, str(job)]), name="job")
    outcomes = [alloctune.sweep(spec, grid=GRID, repeats=1, backend="cuda", results_root=tmp_path / name,
                                gpus=gpus, executor=name)
                for name, gpus in (("local", [0, 1]), ("ray", None))]
    local, on_ray = ({r.conf: (r.state, r.measurement.peak_reserved_bytes) for r in o.folder.trials()}
                     for o in outcomes)
    assert on_ray == local and len(on_ray) == 3 and all(state is TrialState.OK for state, _ in on_ray.values())
    assert [c.best.conf for c in outcomes[1].choices] == ["expandable_segments:True"]
    assert all(r.gpus in ("0", "1") and r.node == socket.gethostname() for r in outcomes[1].folder.trials())


def test_killed_ray_workers_are_retried_once_then_crashed_and_nothing_is_lost(cluster, standin, tmp_path):
    python, state = standin
    (state / "kill-expandable_segments:True").write_text("1")  # its worker dies once: the retry runs it
    (state / "kill-max_split_size_mb:128").write_text("2")     # dies twice: a crashed trial with the reason
    outcome, notices = run(tmp_path, "ray", python, repeats=1, executor="ray")

    lines = (outcome.folder.path / "trials.jsonl").read_text().splitlines()
    records = {r.conf: r for r in TrialStore(outcome.folder.path / "trials.jsonl").load()}
    assert len(lines) == 3 and set(records) == {"", "expandable_segments:True", "max_split_size_mb:128"}
    assert records[""].state is TrialState.OK and records[""].retried is None
    retried = records["expandable_segments:True"]
    assert retried.state is TrialState.OK and "WorkerCrashedError" in retried.retried
    lost = records["max_split_size_mb:128"]
    assert lost.state is TrialState.CRASHED and "lost twice" in lost.error and "WorkerCrashedError" in lost.error
    assert sum("retrying once" in n for n in notices) == 2
    [choice] = outcome.choices
    assert choice.best.conf == "expandable_segments:True"


def test_ctrl_c_cancels_the_ray_tasks_in_flight(cluster, standin, tmp_path):
    """A real interrupt: a driver connected to the module's Ray gets SIGINT while a trial child runs on a worker;
    the child must not survive and nothing half-done is recorded."""
    python, state = standin
    (state / "hang").write_text("")
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import alloctune
        alloctune.sweep({str(PACKED)!r}, preset="h200", grid={GRID!r}, pythons=[{python!r}], backend="cuda", repeats=1,
                        executor="ray", ray_address={cluster!r}, results_root={str(tmp_path / "results")!r})
    """))
    proc = subprocess.Popen([sys.executable, str(driver)], stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=hear_ctrl_c)
    pidfile = state / "child.pid"
    pid = wait_until(lambda: (pidfile.exists() and pidfile.read_text()) or proc.poll() is not None, 90,
                     "a trial started on a Ray worker")
    assert proc.poll() is None, proc.stderr.read().decode()
    child = int(pid)   # read once: a second trial on the other GPU may be rewriting the file
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert b"KeyboardInterrupt" in stderr
    child = int(pidfile.read_text())
    wait_until(lambda: not running(child), 30, "the interrupted trial child has exited")
    trial_folder = Path((state / "child.dir").read_text())   # the cancelled task removed it
    wait_until(lambda: not trial_folder.exists(), 20, "the cancelled trial's folder is removed")
    assert trial_folder.name.startswith("alloctune-trial-")
    assert not (tmp_path / "results").exists()   # no trial finished: the sweep took back the folder it made


def test_a_trial_on_another_gpu_model_does_not_count(standin, tmp_path):
    """A node set up differently (another GPU model than the probe saw) yields a crashed trial saying so, never
    a sample mixed into the statistics. Same rule with any executor: shown here with the local one."""
    python, state = standin
    (state / "gpu-max_split_size_mb:128").write_text("Other GPU")
    outcome, _ = run(tmp_path, "local", python, repeats=1)
    records = {r.conf: r for r in outcome.folder.trials()}
    odd = records["max_split_size_mb:128"]
    assert odd.state is TrialState.CRASHED and odd.env["gpu"] == "Other GPU"
    assert f"ran on Other GPU on {socket.gethostname()}, but torch-" in odd.error
    assert "probed on Stand-in GPU" in odd.error
    assert all(r.state is TrialState.OK for conf, r in records.items() if conf != "max_split_size_mb:128")


def test_a_gpu_model_the_cluster_lacks_is_refused_before_anything_runs(cluster, standin, tmp_path):
    python, _ = standin
    with pytest.raises(AlloctuneError, match="ray_accelerator A100: the Ray cluster has H200"):
        run(tmp_path, "ray", python, executor="ray", ray_accelerator="A100")
    assert not (tmp_path / "ray").exists()
