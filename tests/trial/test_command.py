"""Command mode without a GPU, with real subprocesses: bad commands stop before any trial, a trial's outcome for a
command that never uses CUDA, exits 1 or hangs with a child, the start-up hook's own behaviour (chaining, plain
files, no torch import), --isolate-cwd, the environment a trial gets, throughput readers, records and summary.
What needs CUDA (peaks, OOMs, SIGTERM at the limit, record/replay of ranks) is in test_command_gpu.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import pytest
from folders import make_folder
from pids import running

import alloctune
from alloctune.errors import AlloctuneError, WorkloadError
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.api.analyze import analyze
from alloctune.sweeper.options import SweepOptions
from alloctune.sweeper.plan import gpu_slots
from alloctune.trial.command import (
    NOTHING_TO_MEASURE,
    check_measurable,
    hook_environment,
    keep_traces,
    run_command,
    run_command_trial,
)
from alloctune.runtime.peaks import DevicePeaks, ProcessReport
from alloctune.trial.task import TrialTask, child_environment
from alloctune.trial.throughput import metric_values, step_rate
from alloctune.workload.command import CommandSpec, check_command, command_name, command_workload, target_python
from alloctune.workload.loader import load_workload
from alloctune.workload.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20


def _cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "alloctune", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ if env is None else env, PYTHONPATH=str(ROOT)))


def _trial(argv, conf="expandable_segments:True", timeout=30.0, **kw):
    spec = command_workload(check_command(argv, **kw))
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(conf), 0, sys.executable, "torch-test",
                     timeout_s=timeout)
    return run_command_trial(task, None)


@pytest.mark.parametrize("argv, message", [
    (["no-such-program-here", "x"], "command not found: no-such-program-here (not on PATH)"),
    (["./not-executable.sh"], "./not-executable.sh is a file, not a command (it is not executable) or a workload "
                              "file (.yaml, .yml)"),
    (["./"], "command is not an executable file: ./"),
    (["./missing/run.sh"], "command not found: ./missing/run.sh"),
])
def test_a_bad_command_is_one_line_and_exit_2_before_anything_runs(tmp_path, argv, message):
    (tmp_path / "not-executable.sh").write_text("#!/bin/sh\nexit 0\n")
    done = _cli("sweep", "--results", str(tmp_path / "results"), "--", *argv, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"alloctune: error: {message}"
    assert "Traceback" not in done.stderr and not (tmp_path / "results").exists()


def test_a_file_that_is_no_program_is_said_to_be_a_file_and_any_yaml_name_is_a_workload(tmp_path):
    """A word that names a file (meant as a workload, or a script to run) is not 'not on PATH'; a workload file's
    name ends in .yaml or .yml in any case, so a missing one is said to be missing, not to be no command."""
    (tmp_path / "data.txt").write_text("steps: 3\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "run.sh").chmod(0o755)
    (tmp_path / "w.yaml").write_text("name: w\nkind: transformer\nsteps: 4\n")
    no_program = "is a file, not a command (it is not executable) or a workload file (.yaml, .yml)"
    # among a command's words, a workload file is said to be one (it was said to be none)
    workload = ("w.yaml is a workload file, not a command: sweep or record it by its path alone "
                "(`alloctune sweep w.yaml`; from Python, `sweep('w.yaml')`)")
    said = {("sweep", "data.txt"): f"data.txt {no_program}",
            ("sweep", "w.yaml", "extra"): workload,
            ("record", "-o", "t.pickle", "w.yaml", "extra"): workload,
            ("sweep", "--", "./data.txt", "x"): f"./data.txt {no_program}",
            ("sweep", "--", "run.sh"): "command not found: run.sh (not on PATH; ./run.sh runs the file here)",
            ("sweep", "typo.YAML"): "typo.YAML: cannot read workload file: No such file or directory",
            ("record", "-o", "t.pickle", "data.txt"): f"data.txt {no_program}",
            ("record", "-o", "t.pickle", "typo.Yml"): "typo.Yml: cannot read workload file: No such file or directory"}
    for args, message in said.items():
        done = _cli(*args, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr == f"alloctune: error: {message}\n", (args, done.stderr)
    with pytest.raises(WorkloadError) as refused:
        alloctune.sweep(["w.yaml"], cwd=tmp_path)
    assert str(refused.value) == workload


def test_a_command_that_never_uses_cuda_has_nothing_to_measure():
    record = _trial([sys.executable, "-c", "print('hello')"])
    assert record.state is TrialState.CRASHED and record.error.startswith(NOTHING_TO_MEASURE)
    assert record.processes is None and record.measurement is None
    with pytest.raises(AlloctuneError, match="nothing to measure"):
        check_measurable(record)


def test_a_command_that_exits_1_is_crashed_with_its_last_stderr_lines():
    program = "import sys\nfor i in range(40): print(f'line {i}', file=sys.stderr)\nsys.exit(1)"
    record = _trial([sys.executable, "-c", program])
    assert record.state is TrialState.CRASHED
    lines = record.error.splitlines()
    assert lines[0] == "the command exited with status 1"
    assert lines[-1] == "line 39" and "line 15" in lines and "line 14" not in lines   # the last 25
    check_measurable(record)   # a crash is data, not a reason to stop the sweep


def test_a_command_that_hangs_with_a_child_is_killed_at_the_limit_with_its_whole_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    program = ("import subprocess, sys, time\n"
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
               f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(600)\n")
    t0 = time.monotonic()
    record = _trial([sys.executable, "-c", program], timeout=3)
    assert time.monotonic() - t0 < 20
    assert record.state is TrialState.TIMEOUT and "3 s time limit" in record.error
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and running(child):
        time.sleep(0.05)
    assert not running(child)


def test_a_trial_gets_its_setting_alone_and_its_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync")   # a stray one from the shell
    out = tmp_path / "env.json"
    program = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    spec = command_workload(check_command([sys.executable, "-c", program], env={"MY_FLAG": "1"}))
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse("roundup_power2_divisions:4"), 0,
                     sys.executable, "torch-test")
    run_command_trial(task, (2, 3))
    env = json.loads(out.read_text())
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "roundup_power2_divisions:4" and "PYTORCH_ALLOC_CONF" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["MY_FLAG"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT / "alloctune" / "runtime" / "hook")


def test_the_hook_chains_to_the_users_sitecustomize_writes_plain_json_and_leaves_torch_alone(tmp_path):
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_HOOK_RAN'] = 'yes'\n")
    report = tmp_path / "seen.json"
    program = ("import json, os, sys, alloctune\n"
               "for _ in range(3): alloctune.step(units=8)\n"
               f"json.dump({{'theirs': os.environ.get('THEIR_HOOK_RAN'), 'torch': 'torch' in sys.modules}}, "
               f"open({str(report)!r}, 'w'))\n")
    env = hook_environment(child_environment(AllocConf.parse(""), None,
                                             dict(os.environ, PYTHONPATH=str(theirs))), "")
    run = run_command([sys.executable, "-c", program], env, None, 30, str(tmp_path / "work"))
    assert run.returncode == 0
    assert json.loads(report.read_text()) == {"theirs": "yes", "torch": False}
    (proc,) = run.processes
    assert proc.cuda is False and proc.devices == [] and proc.rank is None and proc.pid != os.getpid()
    assert [units for _, units in proc.steps] == [8.0, 8.0, 8.0]
    raw = json.loads((tmp_path / "work" / "procs" / f"proc-{proc.pid}.json").read_text())
    assert sorted(raw) == sorted(f.name for f in fields(ProcessReport))   # plain JSON, every field, nothing else


def test_a_python_process_that_marks_nothing_and_never_uses_cuda_leaves_no_file(tmp_path):
    env = hook_environment(child_environment(AllocConf.parse(""), None), "")
    run = run_command([sys.executable, "-c", "import torch; x = torch.ones(3)"], env, None, 60,
                      str(tmp_path))
    assert run.returncode == 0 and run.processes == [] and os.listdir(tmp_path / "procs") == []


def test_step_marks_outside_a_trial_do_nothing():
    program = "import alloctune, alloctune.runtime.steps as s\nalloctune.step(5)\nprint(len(s.marks()))"
    env = {k: v for k, v in os.environ.items() if k != "ALLOCTUNE_HOOK_OUT"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=str(ROOT)))
    assert done.stdout.strip() == "0"


def test_isolate_cwd_gives_each_trial_its_own_folder(tmp_path, monkeypatch):
    job = tmp_path / "job.py"
    job.write_text("import os, sys\nopen('out.txt', 'w').write(os.getcwd())\n"
                   "open(sys.argv[1], 'a').write(os.getcwd() + '\\n')\n")
    log = tmp_path / "cwds.txt"
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        record = _trial([sys.executable, "job.py", str(log)], isolate_cwd=True)
        assert record.error.startswith(NOTHING_TO_MEASURE)
    first, second = log.read_text().split()
    assert first != second and str(tmp_path) not in (first, second)
    assert not (tmp_path / "out.txt").exists() and not Path(first).exists()   # removed after the trial


def test_command_checks(tmp_path):
    with pytest.raises(WorkloadError, match="sets PYTORCH_CUDA_ALLOC_CONF"):
        check_command([sys.executable], env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    with pytest.raises(WorkloadError, match="metric_regex '\\(\\[': "):
        check_command([sys.executable], metric_regex="([")
    spec = check_command(["python3", "train.py"])
    assert os.path.isabs(spec.argv[0]) and target_python(spec) == spec.argv[0]
    assert command_name(spec.argv) == "cmd-train" and command_name(["/usr/bin/env"]) == "cmd-env"
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python3").symlink_to(sys.executable)   # a virtual environment's python is a link: keep it
    assert check_command([str(venv / "python3")]).argv[0] == str(venv / "python3")
    script = tmp_path / "launcher"
    script.write_text(f"#!/usr/bin/env {os.path.basename(sys.executable)}\nprint(1)\n")
    script.chmod(0o755)
    launcher = check_command([str(script)])
    assert os.path.basename(target_python(launcher)) == os.path.basename(sys.executable)


def test_throughput_readers(tmp_path):
    assert step_rate([[(0.0, 5), (1.0, 5), (2.0, 10), (3.0, 10)]], warmup=1) == (25 / 3, 3.0, 3)
    assert step_rate([[(0.0, 5), (1.0, 5), (2.0, 10), (3.0, 10)]], warmup=2) == (10.0, 2.0, 2)
    assert step_rate([[(0.0, 1), (1.0, 1)], [(0.0, 1), (0.5, 1), (1.0, 1)]], warmup=1) == (1.0 + 2.0, 1.0, 2)
    assert step_rate([[(0.0, 1), (1.0, 1)]], warmup=2) is None
    out = tmp_path / "out.txt"
    out.write_text("epoch 1: 1,200.5 tok/s\nnoise 3 tok\nepoch 2: 1300 tok/s and 1400 tok/s\n")
    assert metric_values(str(out), r"([\d,.]+) tok/s") == [1200.5, 1300.0, 1400.0]
    assert metric_values(str(out), r"epoch (?P<epoch>\d): (?P<value>[\d,.]+)") == [1200.5, 1300.0]


def test_command_workload_files(tmp_path):
    (tmp_path / "jobs").mkdir()
    path = tmp_path / "job.yaml"
    path.write_text("name: my-job\ncommand: [python3, train.py, --steps, 10]\ncwd: jobs\nenv: {A: b}\n"
                    "metric_regex: '([0-9.]+) it/s'\nunit: samples\ntimeout_s: 60\n")
    spec = load_workload(path)
    command = CommandSpec.from_dict(spec.command)
    assert command.argv[1:] == ("train.py", "--steps", "10") and command.cwd == str(tmp_path / "jobs")
    assert (spec.unit, spec.timeout_s, command.env) == ("samples", 60.0, {"A": "b"})
    assert WorkloadSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    other = replace(spec, command={**spec.command, "argv": [*command.argv, "--more"]})
    assert other.digest() != spec.digest()
    path.write_text("name: my-job\ncommand: [python3, x.py]\nparams: {a: 1}\n")
    with pytest.raises(WorkloadError, match="'params': does not apply to a 'command' workload"):
        load_workload(path)
    path.write_text("name: my-job\ncommand: [no-such-program-here]\n")
    with pytest.raises(WorkloadError, match="command not found"):
        load_workload(path)


def test_records_before_processes_existed_still_read():
    old = {"workload": "w", "workload_hash": "h", "conf": "", "repeat": 0, "env_id": "e", "backend": "cuda",
           "state": "ok", "schema": 1}
    assert TrialRecord.from_json(old).processes is None
    rows = [{"pid": 7, "rank": 1, "device": 0, "peak_reserved_bytes": 5}]
    record = replace(TrialRecord.from_json(old), processes=rows)
    assert TrialRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def test_gpu_slots():
    assert gpu_slots([0, 1, 2, 3], 2) == [(0, 1), (2, 3)] and gpu_slots([0, 1], 1) == [0, 1]
    with pytest.raises(AlloctuneError, match=r"gpus_per_trial 2: expected a positive divisor of the number of gpus"):
        SweepOptions(gpus=[0, 1, 2], gpus_per_trial=2)


def test_summary_says_which_rank_peaked(tmp_path):
    def trial(conf, reserved):
        rows = [{"pid": 10 + r, "rank": r, "device": r, "peak_reserved_bytes": size * MiB,
                 "peak_allocated_bytes": size * MiB // 2} for r, size in enumerate(reserved)]
        return TrialRecord(workload="w", workload_hash="h1", conf=conf, repeat=0, env_id="torch-2.11.0",
                           backend="cuda", state=TrialState.OK, processes=rows, env={"torch": "2.11.0"},
                           measurement=Measurement(peak_reserved_bytes=max(reserved) * MiB,
                                                   peak_allocated_bytes=max(reserved) * MiB // 2))
    folder = make_folder(tmp_path / "f", [trial("", [300, 500]), trial("expandable_segments:True", [400, 200])])
    analyze(folder)
    summary = (folder.path / "summary.md").read_text()
    assert "## Per process" in summary
    assert "| default | 1 | ok | rank 1 |" in summary and "| expandable_segments:True | 1 | ok | rank 0 |" in summary


def test_every_python_process_of_a_command_gets_the_hook(tmp_path):
    """Ranks started by the command (here two subprocesses with RANK set) each write their own file."""
    program = ("import os, subprocess, sys\n"
               "if len(sys.argv) == 1:\n"
               "    ps = [subprocess.Popen([sys.executable, __file__, str(r)], env=dict(os.environ, RANK=str(r)))\n"
               "          for r in (0, 1)]\n"
               "    sys.exit(max(p.wait() for p in ps))\n"
               "import alloctune\n"
               "for _ in range(2 + int(sys.argv[1])): alloctune.step()\n")
    job = tmp_path / "ranks.py"
    job.write_text(program)
    env = hook_environment(child_environment(AllocConf.parse(""), None), "")
    run = run_command([sys.executable, str(job)], env, None, 60, str(tmp_path / "work"))
    assert run.returncode == 0
    assert [(p.rank, len(p.steps)) for p in run.processes] == [(0, 2), (1, 3)]
    assert len({p.pid for p in run.processes}) == 2


def test_a_hybrid_sweep_keeps_the_trace_of_every_process_that_allocated_named_by_rank(tmp_path):
    procs = tmp_path / "procs"
    procs.mkdir()
    for pid in (11, 12, 13, 15):
        (procs / f"trace-{pid}.pickle").write_bytes(str(pid).encode())

    def process(pid, rank, *reserved):
        return ProcessReport(pid=pid, rank=rank, cuda=True,
                             devices=[DevicePeaks(i, r * MiB, 0) for i, r in enumerate(reserved)])

    processes = [process(11, 0, 5), process(12, 1, 2, 9), process(13, None, 7),
                 process(14, 2, 99),   # left no trace
                 process(15, None)]    # initialised CUDA, allocated nothing (a torch.compile worker)
    keep_traces(str(procs), processes, str(tmp_path / "kept.pickle"))
    kept = {p.name: p.read_bytes() for p in tmp_path.glob("kept*")}
    assert kept == {"kept.rank0.pickle": b"11", "kept.rank1.pickle": b"12", "kept.pid13.pickle": b"13"}
    # one process: the target itself, as before several were kept
    (procs / "trace-11.pickle").write_bytes(b"11")
    keep_traces(str(procs), processes[:1], str(tmp_path / "one.pickle"))
    assert (tmp_path / "one.pickle").read_bytes() == b"11"


@pytest.mark.slow
def test_a_hybrid_sweep_of_a_command_is_accepted_and_needs_a_gpu(tmp_path):
    done = _cli("sweep", "--backend", "hybrid", "--results", str(tmp_path / "results"), "--", sys.executable, "-c",
                "pass", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "a command is measured on a GPU, and none is visible" in done.stderr


def test_an_uncaptured_command_prints_to_our_standard_error_not_our_output(tmp_path):
    """`record` and `fit` show the job's output as it runs (capture=False): on standard error, since standard output
    carries alloctune's own results (`--json`), which the job's prints would corrupt (seen on the H200: `fit --json`
    of a transformers script began with the script's own line)."""
    code = ("import sys; from alloctune.trial.command import run_command\n"
            "run_command([sys.executable, '-c', 'print(\"from the job\")'], {}, None, 60, sys.argv[1], capture=False)\n"
            "print('ours')")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ours\n" and "from the job" in done.stderr
