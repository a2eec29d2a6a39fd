"""Zero-code steps and the --steps window on the CPU, with real subprocesses and real torch (the CPU build): the
start-up hook counts a real `torch.optim` loop's steps (the global optimizer step hook is the real one; only the
CUDA synchronisation and NVML are absent here), the --step-on calls, the marks; it ends every process of the job
at the same step, a real 2-rank torchrun job over gloo included; the parent's order of throughput sources; what
a CPU-only process writes; the options as the CLI takes them; what the summary says. What needs CUDA (the
synchronised window, peak readings, growth samples, NVML, budgets per device) is tests/trial/test_window_gpu.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from folders import new_folder

from alloctune.errors import WorkloadError
from alloctune.api.analyze import analyze
from alloctune.results.folder import SweepInfo
from alloctune.results.records import Measurement, ThroughputSource, TrialRecord, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.trial.command import hook_environment, run_command, run_command_trial
from alloctune.trial.job import Run
from alloctune.runtime.peaks import DevicePeaks, ProcessReport, StepCount
from alloctune.trial.task import TrialTask, child_environment
from alloctune.trial.throughput import timing
from alloctune.workload.command import CommandSpec, check_command, command_workload
from alloctune.workload.loader import load_workload

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20

# A real optimizer loop on the CPU: it prints before each step, and once after the loop.
TRAIN = """
import sys, torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(int(sys.argv[1])):
    loss = model(torch.randn(4, 8)).square().mean()
    opt.zero_grad()
    loss.backward()
    print(f"before step {i + 1}", end="\\n")
    opt.step()
print("the loop ended")
"""


def _script(tmp_path, text, name="job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _run(tmp_path, argv, work="work", **hook):
    env = hook_environment(child_environment(AllocConf.parse(""), None), "", **hook)
    env.pop("PYTHONUNBUFFERED")   # the hook flushes what the program printed before it ends the process
    return run_command(argv, env, None, 120, str(tmp_path / work))


def _out(run: Run) -> str:
    return Path(run.stdout).read_text()


def test_a_window_ends_the_process_at_its_step_after_writing_its_report(tmp_path):
    job = _script(tmp_path, TRAIN)
    run = _run(tmp_path, [sys.executable, str(job), "50"], warmup_steps=2, window_steps=5)
    assert run.returncode == 0, Path(run.stderr).read_text()
    out = _out(run)
    assert "before step 7" in out and "before step 8" not in out and "the loop ended" not in out
    (proc,) = run.processes
    (count,) = proc.counted
    assert (count.source, count.name, count.count, count.warmup) == (ThroughputSource.OPTIMIZER_STEPS, "SGD", 7, 2)
    assert proc.window_ended and proc.optimizer_hook is True and count.start < count.last <= count.end
    # A CPU-only process writes its steps and features, no device figures
    assert proc.cuda is False and proc.devices == [] and proc.window_reserved is None and proc.growth_samples == []
    assert proc.features["torch_version"] == proc.torch_version and run.features == []


def test_without_a_window_every_step_counts_and_the_rate_is_over_the_steps_after_the_warm_up(tmp_path):
    job = _script(tmp_path, TRAIN)
    run = _run(tmp_path, [sys.executable, str(job), "30"], warmup_steps=3)
    assert run.returncode == 0 and "the loop ended" in _out(run)
    (proc,) = run.processes
    (count,) = proc.counted
    assert count.count == 30 and not proc.window_ended
    assert count.end is None   # the exit's synchronised time needs CUDA; the host's last step time is used
    spec = command_workload(check_command([sys.executable, str(job)]), warmup_steps=3)
    timed = timing(run, CommandSpec.from_dict(spec.command), spec.to_dict())
    seconds = count.last - count.start
    assert (timed.source, timed.unit, timed.steps) == (ThroughputSource.OPTIMIZER_STEPS, "steps", 27)
    assert timed.throughput == pytest.approx(27 / seconds) and timed.seconds == pytest.approx(seconds)
    spec = command_workload(check_command([sys.executable, str(job)]), warmup_steps=3, unit="32 samples")
    timed = timing(run, CommandSpec.from_dict(spec.command), spec.to_dict())
    assert (timed.unit, timed.throughput) == ("samples", pytest.approx(32 * 27 / seconds))


def _stand_in_cuda_process(tmp_path) -> Path:
    """No GPU here: a process of the job writes the report a CUDA process would (the trial needs one to be
    measured); every other figure of the trial comes from the job's real processes."""
    report = ProcessReport(pid=1, cuda=True, effective_conf="", devices=[DevicePeaks(0, 64 * MiB, 40 * MiB)])
    return _script(tmp_path, f"""
        import json, os
        with open(os.path.join(os.environ["ALLOCTUNE_HOOK_OUT"], "proc-1.json"), "w") as f:
            f.write({json.dumps(json.dumps(report.to_json()))})
        """, "stand_in.py")


def test_torchrun_ranks_stop_together_at_the_windows_step_and_the_trial_is_ok(tmp_path):
    """examples/ddp_train.py, 2 ranks over gloo on the CPU, 40 steps asked, a window of 4 after 2 warm-up steps."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    stand_in = _stand_in_cuda_process(tmp_path)
    job = [torchrun, "--standalone", "--nproc-per-node", "2", str(ROOT / "examples" / "ddp_train.py"), "--steps",
           "40", "--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "200", "--seq-len", "8", "16",
           "--batch", "2", "4", "--log-every", "1"]
    script = _script(tmp_path, f"""
        import subprocess, sys
        code = subprocess.call({job!r})
        sys.exit(code or subprocess.call([sys.executable, {str(stand_in)!r}]))
        """, "launch.py")
    spec = command_workload(check_command([sys.executable, str(script)]), warmup_steps=2, steps=4)
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "torch-test",
                     timeout_s=300)
    record = run_command_trial(task)
    assert record.state is TrialState.OK, record.error
    m = record.measurement
    assert m.ended_by_window and m.throughput_source is ThroughputSource.OPTIMIZER_STEPS
    assert (m.unit, m.measured_steps) == ("steps", 4) and m.throughput > 0
    assert m.peak_reserved_bytes == 64 * MiB and m.peak_rising is None   # the stand-in read no window peaks
    assert record.features == []   # observed: gloo groups only, nothing the known problems concern


def test_the_ranks_of_a_torchrun_job_count_the_same_steps(tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    run = _run(tmp_path, [torchrun, "--standalone", "--nproc-per-node", "2", str(ROOT / "examples" / "ddp_train.py"),
                          "--steps", "40", "--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "200",
                          "--seq-len", "8", "16", "--batch", "2", "4", "--log-every", "1"],
               warmup_steps=1, window_steps=3)
    assert run.returncode == 0, Path(run.stderr).read_text()[-3000:]
    assert [(p.rank, [c.count for c in p.counted], p.window_ended) for p in run.processes] == [
        (0, [4], True), (1, [4], True)]
    out = _out(run)
    assert "step 3/40" in out and "step 4/40" not in out   # rank 0 logs after its step: it stopped in step 4
    assert {tuple(p.features["process_groups"]) for p in run.processes} == {("gloo",)}


# A library the job imports (--step-on names a callable of an imported module), and a job that uses it.
LIBRARY = """
class Generator:
    def generate(self, n):
        return n if n <= 1 else self.generate(n - 1) + 1   # nested calls: only the outermost counts

    @classmethod
    def make(cls):
        return cls()

    @staticmethod
    def double(x):
        return 2 * x
"""
USES_LIBRARY = """
import sys
import mylib
for i in range(int(sys.argv[1])):
    g = mylib.Generator.make()
    assert g.generate(3) == 3 and mylib.Generator.double(i) == 2 * i and isinstance(g, mylib.Generator)
print("done")
"""


@pytest.mark.parametrize("qualname, count", [
    ("Generator.generate", 20), ("Generator.make", 20), ("Generator.double", 20)])
def test_step_on_counts_the_returns_of_a_named_callable_and_keeps_its_kind(tmp_path, qualname, count):
    """No torch at all: a process that counted steps writes its report too."""
    _script(tmp_path, LIBRARY, "mylib.py")
    job = _script(tmp_path, USES_LIBRARY)
    run = _run(tmp_path, [sys.executable, str(job), "20"], step_on=f"mylib:{qualname}")
    assert run.returncode == 0, Path(run.stderr).read_text()
    assert "done" in _out(run) and "alloctune hook" not in Path(run.stderr).read_text()
    (proc,) = run.processes
    assert [(c.source, c.name, c.count) for c in proc.counted] == [
        (ThroughputSource.STEP_CALLS, f"mylib:{qualname}", count)]
    assert proc.torch_version is None and proc.optimizer_hook is None


def test_step_on_a_callable_that_is_not_there_says_so_and_the_job_runs_on(tmp_path):
    _script(tmp_path, LIBRARY, "mylib.py")
    job = _script(tmp_path, USES_LIBRARY)
    run = _run(tmp_path, [sys.executable, str(job), "3"], step_on="mylib:Generator.missing")
    assert run.returncode == 0 and "done" in _out(run)
    assert "alloctune hook: cannot watch mylib: AttributeError" in Path(run.stderr).read_text()
    assert run.processes == []   # nothing counted, no CUDA: no report


def test_step_on_forward_counts_top_level_model_calls_and_a_window_follows_them(tmp_path):
    job = _script(tmp_path, """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        with torch.no_grad():
            for i in range(100):
                model(torch.randn(3, 4))
                print(f"call {i + 1}")
        """)
    run = _run(tmp_path, [sys.executable, str(job)], step_on="forward", warmup_steps=2, window_steps=6)
    assert run.returncode == 0, Path(run.stderr).read_text()
    assert "call 7" in _out(run) and "call 8" not in _out(run)   # ended inside call 8's top-level forward
    (proc,) = run.processes
    assert [(c.source, c.count) for c in proc.counted] == [(ThroughputSource.STEP_CALLS, 8)] and proc.window_ended


def test_marks_win_over_optimizer_steps_in_the_job_and_in_the_record(tmp_path):
    """Two optimizer steps per mark: the window counts marks; the throughput is the marks'."""
    job = _script(tmp_path, """
        import torch, alloctune
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.1)
        for i in range(50):
            for _ in range(2):
                w.sum().backward()
                opt.step()
            alloctune.step(units=16)
        """)
    run = _run(tmp_path, [sys.executable, str(job)], warmup_steps=1, window_steps=3)
    assert run.returncode == 0, Path(run.stderr).read_text()
    (proc,) = run.processes
    assert len(proc.steps) == 4 and proc.counted[0].count == 8 and proc.window_ended
    spec = command_workload(check_command([sys.executable, str(job)]), warmup_steps=1, steps=3)
    timed = timing(run, CommandSpec.from_dict(spec.command), spec.to_dict())
    assert (timed.source, timed.unit, timed.steps) == (ThroughputSource.STEP_MARKS, "units", 3)


def _report(pid, marks=(), optimizers=(), calls=None, warmup=1, window_ended=False):
    counted = [StepCount(ThroughputSource.OPTIMIZER_STEPS, name, n, warmup, 0.0, float(n), None)
               for name, n in optimizers]
    if calls is not None:
        counted.append(StepCount(ThroughputSource.STEP_CALLS, "m:f", calls, warmup, 0.0, 2.0, 1.5))
    return ProcessReport(pid=pid, cuda=True, steps=[(float(t), 1.0) for t in marks], counted=counted,
                         window_ended=window_ended)


def test_the_order_of_throughput_sources(tmp_path):
    out, err = tmp_path / "out", tmp_path / "err"
    out.write_text("3 it/s\n5 it/s\n7 it/s\n")
    err.write_text("")
    plain, regex = CommandSpec(("x",)), CommandSpec(("x",), metric_regex=r"([\d.]+) it/s")
    workload = {"unit": "runs", "warmup_steps": 1}

    def source(command, *processes, wall=4.0):
        timed = timing(Run(0, False, wall, str(out), str(err), list(processes)), command, workload)
        return timed.source, timed.throughput

    everything = _report(1, marks=(0, 1, 2), optimizers=[("SGD", 5)], calls=4)
    assert source(regex, everything) == (ThroughputSource.METRIC_REGEX, 6.0)
    assert source(plain, everything) == (ThroughputSource.STEP_MARKS, 1.0)
    assert source(plain, _report(1, marks=(0,), optimizers=[("SGD", 5)], calls=4)) == (
        ThroughputSource.STEP_CALLS, 3 / 2.0)   # one mark is only the warm-up
    # per process, the optimizer that stepped most (ties: the first seen); summed over processes
    assert source(plain, _report(1, optimizers=[("Adam", 3), ("SGD", 5), ("AdamW", 5)]),
                  _report(2, optimizers=[("SGD", 3)])) == (ThroughputSource.OPTIMIZER_STEPS, 4 / 5 + 2 / 3)
    # a window's synchronised end, where it ended the process
    assert source(plain, _report(1, calls=4, window_ended=True)) == (ThroughputSource.STEP_CALLS, 3 / 1.5)
    assert source(plain, _report(1, optimizers=[("SGD", 1)])) == (ThroughputSource.WALL_TIME, 0.25)
    out.write_text("no numbers\n")
    assert source(regex, everything) == (ThroughputSource.METRIC_REGEX, None)   # asked for: never replaced


def test_a_launcher_that_fails_after_its_workers_window_says_so(tmp_path):
    _script(tmp_path, LIBRARY, "mylib.py")
    worker = _script(tmp_path, USES_LIBRARY, "worker.py")
    launcher = _script(tmp_path, f"""
        import subprocess, sys
        out = subprocess.run([sys.executable, {str(worker)!r}, "50"], capture_output=True, text=True).stdout
        sys.exit(0 if "done" in out else 3)   # it expected its worker to finish
        """, "launch.py")
    spec = command_workload(check_command([sys.executable, str(launcher)], step_on="mylib:Generator.generate"),
                            steps=5)
    record = run_command_trial(TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable,
                                         "torch-test", timeout_s=60))
    assert record.state is TrialState.CRASHED
    assert record.error.startswith("the command exited with status 3, after its --steps window ended 1 of its "
                                   "processes")


def test_the_window_and_step_options_in_the_workload_and_its_digest(tmp_path):
    command = check_command([sys.executable, "-c", "pass"])
    base = command_workload(command)
    # unset, the new fields stay out of the command's record: the digest of a command sweep made before is kept
    assert sorted(command.to_dict()) == ["argv", "cwd", "env", "isolate_cwd", "metric_regex"]
    windowed = command_workload(command, steps=200)
    assert windowed.steps == 200 and windowed.digest() != base.digest()
    on = check_command([sys.executable, "-c", "pass"], step_on="forward")
    assert command_workload(on).digest() != base.digest()
    assert CommandSpec.from_dict(command_workload(on, unit="8 tokens").command) == replace(on, units_per_step=8.0)
    assert command_workload(command, unit="8 tokens").digest() != command_workload(command, unit="tokens").digest()
    path = tmp_path / "job.yaml"   # a workload file that names a command says the same
    path.write_text(f"name: job\ncommand: [{sys.executable}, -c, pass]\nsteps: 200\nstep_on: forward\n"
                    f"unit: 8 tokens\n")
    spec = load_workload(path)
    assert spec.steps == 200 and CommandSpec.from_dict(spec.command) == replace(on, units_per_step=8.0)
    path.write_text(f"name: job\ncommand: [{sys.executable}, -c, pass]\nstep_on: 3\n")
    with pytest.raises(WorkloadError, match="step_on 3: expected 'forward'"):
        load_workload(path)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "alloctune", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.mark.parametrize("args, message", [
    (["sweep", "--steps", "0", "--", sys.executable, "-c", "pass"],
     "argument --steps: expected a whole number from 1 to 2**63 - 1, got '0'"),
    (["sweep", "--step-on", "generate", "--", sys.executable, "-c", "pass"],
     "--step-on 'generate': expected 'forward' (calls of the top-level model) or module:qualname of a callable in "
     "a module the job imports, e.g. transformers.generation.utils:GenerationMixin.generate"),
    (["sweep", "--unit", "32 samples", "--metric-regex", "(.*)", "--", sys.executable, "-c", "pass"],
     "--unit 32 samples: a count per step applies to the steps alloctune counts; --metric-regex reads the "
     "throughput from the output"),
    (["sweep", "--warmup-steps", "-1", "--", sys.executable, "-c", "pass"],
     "--warmup-steps must be a whole number of steps from 0 to 2**63 - 1, got -1"),
    (["sweep", "--steps", "5", "w.yaml"], "--steps applies to '-- COMMAND'; a workload file gives its own"),
    (["record", "-o", "t.pickle", "--steps", "5", "w.yaml"],
     "--steps applies to '-- COMMAND'; a workload file says its steps itself"),
    # one rule for the window of sweep, record and fit (record took 2**70, and each said it in its own words)
    (["record", "-o", "t.pickle", "--steps", "5", "--warmup-steps", "-2", "--", sys.executable, "-c", "pass"],
     "--warmup-steps must be a whole number of steps from 0 to 2**63 - 1, got -2"),
    (["record", "-o", "t.pickle", "--warmup-steps", str(2**70), "--", sys.executable, "-c", "pass"],
     f"--warmup-steps must be a whole number of steps from 0 to 2**63 - 1, got {2**70}"),
    (["fit", "--param", "batch=8,16", "--warmup-steps", "-1", "--", sys.executable, "-c", "pass"],
     "--warmup-steps must be a whole number of steps from 0 to 2**63 - 1, got -1"),
])
def test_bad_window_and_step_options_are_one_line_and_exit_2(tmp_path, args, message):
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert message in done.stderr.strip().splitlines()[-1], done.stderr


def test_the_summary_says_where_the_time_came_from_and_what_the_window_covers(tmp_path):
    command = check_command([sys.executable, "train.py"])
    spec = command_workload(command, steps=50)
    info = SweepInfo(workload_name=spec.name, workload_hash=spec.digest(), workload=spec.to_dict(),
                     grid=["", "expandable_segments:True"], repeats=1, created_at="2026-01-02T03:04:05Z",
                     command="alloctune sweep --steps 50 -- python train.py")
    folder = new_folder(tmp_path / "f", info)

    def trial(conf, rising, source=ThroughputSource.OPTIMIZER_STEPS):
        m = Measurement(peak_reserved_bytes=100 * MiB, peak_allocated_bytes=80 * MiB, throughput=10.0, unit="steps",
                        throughput_source=source, ended_by_window=True, peak_rising=rising)
        return TrialRecord(workload=spec.name, workload_hash=spec.digest(), conf=conf, repeat=0, env_id="torch-x",
                           backend="cuda", state=TrialState.OK, measurement=m, env={"torch": "2.11.0"})

    folder.store.append(trial("", False))
    folder.store.append(trial("expandable_segments:True", True))
    analyze(folder)
    summary = (folder.path / "summary.md").read_text()
    assert ("- Where the time came from: optimizer steps, counted by alloctune's start-up hook (no code change) "
            "over the steps after the warm-up, summed over its processes\n") in summary
    assert ("- Window: --steps 50 after 2 warm-up steps; the start-up hook ended 2 of 2 trials there, every "
            "process at the same step (the others ended first): memory covers the warm-up and the window, not the "
            "rest of the job.") in summary
    assert "**Peak reserved was still rising in the window's last fifth** for expandable_segments:True:" in summary


SEARCH_LOOP = [str(ROOT / "examples" / "search_loop.py"), "--widths", "16", "32", "--layers", "1", "2", "--heads",
               "2", "--vocab", "50", "--seq-len", "8", "--batch", "1", "2"]


def test_a_search_loop_in_one_process_is_timed_over_every_model(tmp_path):
    """examples/search_loop.py: ten models one after another, eight optimizer steps each, a new AdamW each time:
    one source of 80 steps, its rate over the 78 after the warm-up, from the first model to the last."""
    run = _run(tmp_path, [sys.executable, *SEARCH_LOOP], warmup_steps=2)
    assert run.returncode == 0 and "done, 10 models" in _out(run), Path(run.stderr).read_text()
    (proc,) = run.processes
    (count,) = proc.counted
    assert (count.name, count.count, count.warmup, count.optimizers) == ("AdamW", 80, 2, 10)
    spec = command_workload(check_command([sys.executable, *SEARCH_LOOP]), warmup_steps=2)
    timed = timing(run, CommandSpec.from_dict(spec.command), spec.to_dict())
    assert (timed.source, timed.steps) == (ThroughputSource.OPTIMIZER_STEPS, 78)
    assert timed.throughput == pytest.approx(78 / (count.last - count.start))


def test_a_gan_keeps_its_optimizers_apart_and_the_one_that_steps_most_is_timed(tmp_path):
    """Two optimizers alive and stepping at once (the discriminator twice per generator step), the pair rebuilt
    once: each pair continues the one before it, and the rate is the discriminator's."""
    job = _script(tmp_path, """
        import torch
        for trial in range(2):
            d, g = torch.nn.Linear(4, 1), torch.nn.Linear(2, 4)
            opt_d, opt_g = torch.optim.Adam(d.parameters()), torch.optim.SGD(g.parameters(), lr=0.01)
            for i in range(10):
                for _ in range(2):
                    d(g(torch.randn(8, 2)).detach()).mean().backward()
                    opt_d.step()
                d(g(torch.randn(8, 2))).mean().backward()
                opt_g.step()
        """)
    run = _run(tmp_path, [sys.executable, str(job)], warmup_steps=2)
    assert run.returncode == 0, Path(run.stderr).read_text()
    (proc,) = run.processes
    assert [(c.name, c.count, c.optimizers) for c in proc.counted] == [("Adam", 40, 2), ("SGD", 20, 2)]
    spec = command_workload(check_command([sys.executable, str(job)]), warmup_steps=2)
    assert timing(run, CommandSpec.from_dict(spec.command), spec.to_dict()).steps == 38


# Steps of about 10 ms (a sleep in each), so that the automatic window's rule is met in about its 5 s; DDP over
# gloo when started by torchrun.
STEADY = """
import os, sys, time, torch
model = torch.nn.Linear(8, 8)
if "RANK" in os.environ:
    torch.distributed.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(int(sys.argv[1])):
    model(torch.randn(4, 8)).square().mean().backward()
    time.sleep(0.01)
    opt.step()
print("the loop ended")
"""


def test_a_confirmation_trial_ends_itself_once_its_steps_time_the_rate_well_enough(tmp_path):
    """early_stop: a job of 100,000 steps ends after the warm-up and enough steady steps (runtime/stopping.py:
    at least 20 steps and 5 s, the rate to 1%), and its record says the window was the automatic one."""
    stand_in = _stand_in_cuda_process(tmp_path)
    job = _script(tmp_path, STEADY)
    script = _script(tmp_path, f"""
        import subprocess, sys
        sys.exit(subprocess.call([sys.executable, {str(job)!r}, "100000"])
                 or subprocess.call([sys.executable, {str(stand_in)!r}]))
        """, "launch.py")
    spec = command_workload(check_command([sys.executable, str(script)]), warmup_steps=2)
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "torch-test",
                     timeout_s=120, early_stop=True)
    record = run_command_trial(task)
    assert record.state is TrialState.OK, record.error
    m = record.measurement
    assert m.ended_by_window and m.auto_window and m.throughput_source is ThroughputSource.OPTIMIZER_STEPS
    assert m.measured_steps >= 20 + 2 and m.measured_seconds >= 5 and record.wall_seconds < 100
    assert not replace(task, early_stop=False).early_stop   # the default: the job runs whole


def test_without_steps_a_confirmation_runs_whole(tmp_path):
    _script(tmp_path, LIBRARY, "mylib.py")
    job = _script(tmp_path, USES_LIBRARY)
    run = _run(tmp_path, [sys.executable, str(job), "30"], early_stop=True)
    assert run.returncode == 0 and "done" in _out(run) and run.processes == []


def test_torchrun_ranks_stop_together_at_the_automatic_window(tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    job = _script(tmp_path, STEADY)
    run = _run(tmp_path, [torchrun, "--standalone", "--nproc-per-node", "2", str(job), "100000"], warmup_steps=2,
               early_stop=True)
    assert run.returncode == 0, Path(run.stderr).read_text()[-3000:]
    assert "the loop ended" not in _out(run)
    counts = [(p.rank, p.window_ended, p.auto_window, [c.count for c in p.counted]) for p in run.processes]
    assert [c[:3] for c in counts] == [(0, True, True), (1, True, True)] and counts[0][3] == counts[1][3]
    assert counts[0][3][0] >= 2 + 20 + 2


@pytest.mark.parametrize("held, covers", [
    (None, "their memory is confirmed for the steps they ran, not for the whole run"),
    (40, "each ran to the step in which the replay of its setting reached peak reserved, so their memory is "
         "confirmed for the steps they ran, the replayed peak's among them"),
])
def test_the_summary_says_which_trials_ended_at_their_automatic_window(tmp_path, held, covers):
    spec = command_workload(check_command([sys.executable, "train.py"]))
    info = SweepInfo(workload_name=spec.name, workload_hash=spec.digest(), workload=spec.to_dict(),
                     grid=["", "expandable_segments:True"], repeats=1, created_at="2026-01-02T03:04:05Z",
                     command="alloctune sweep -- python train.py")
    folder = new_folder(tmp_path / "f", info)
    for conf, auto in (("", True), ("expandable_segments:True", True), ("expandable_segments:True", False)):
        m = Measurement(peak_reserved_bytes=100 * MiB, peak_allocated_bytes=80 * MiB, throughput=10.0, unit="steps",
                        throughput_source=ThroughputSource.OPTIMIZER_STEPS, ended_by_window=auto, auto_window=auto,
                        held_to_step=held if auto else None)
        folder.store.append(TrialRecord(workload=spec.name, workload_hash=spec.digest(), conf=conf,
                                        repeat=0 if auto else 1, env_id="torch-x", backend="cuda",
                                        state=TrialState.OK, measurement=m, env={"torch": "2.11.0"}))
    analyze(folder)
    summary = (folder.path / "summary.md").read_text()
    assert ("- Automatic window: the start-up hook ended 2 of 3 trials (default, expandable_segments:True) once their "
            f"steps after the warm-up had timed the rate well enough, every process at the same step: {covers}.\n") \
        in summary
    assert "- Window: --steps" not in summary
