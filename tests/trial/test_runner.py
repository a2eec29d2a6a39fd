"""The runner against real child processes: stand-in interpreters that crash, hang, exit or answer, and the
real trial child on this (GPU-less) machine."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pids import hear_ctrl_c, running
from waiting import wait_until

from alloctune.results.records import TrialState
from alloctune.results.trials import TrialStore
from alloctune.settings.conf import AllocConf
from alloctune.trial.launch import run_trial, run_trials
from alloctune.trial.task import TrialTask, child_environment
from alloctune.workload.spec import WorkloadSpec

WORKLOAD = WorkloadSpec(name="w", description="", source=None, kind="transformer", entry=None, params={}, preset=None,
                        warmup_steps=1, steps=1, unit="tokens", seed=0).to_dict()


def fake_python(tmp_path, body: str) -> str:
    """An executable that the runner starts in place of python: `$1 $2` are '-m alloctune.child.main', `$3` the spec."""
    path = tmp_path / "fake-python"
    path.write_text("#!" + sys.executable + "\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def task(python: str, conf: str = "", repeat: int = 0, timeout: float = 30) -> TrialTask:
    return TrialTask(WORKLOAD, "hash", AllocConf.parse(conf), repeat, python, "env", timeout_s=timeout)


def test_ok_result_is_read_back(tmp_path):
    python = fake_python(tmp_path, """
        import json, os, sys
        spec = json.load(open(sys.argv[3]))
        m = dict(peak_reserved_bytes=2048, peak_allocated_bytes=1024, throughput=10.0, unit="tokens")
        json.dump({"state": "ok", "measurement": m, "effective_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                   "env": {"torch": "x"}}, open(spec["result"], "w"))
    """)
    record = run_trial(task(python, "expandable_segments:True"))
    assert record.state is TrialState.OK
    assert record.measurement.reserved_ratio == 2.0
    assert record.effective_conf == "expandable_segments:True"  # the setting reached the child's environment
    assert record.env == {"torch": "x"} and record.wall_seconds > 0


def test_crash_by_signal_is_recorded_not_raised(tmp_path):
    python = fake_python(tmp_path, """
        import os, signal, sys
        print("about to crash", file=sys.stderr)
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    record = run_trial(task(python))
    assert record.state is TrialState.CRASHED
    assert "SIGSEGV" in record.error and "about to crash" in record.error


def test_exit_without_result_is_a_crash(tmp_path):
    record = run_trial(task(fake_python(tmp_path, "raise SystemExit(3)\n")))
    assert record.state is TrialState.CRASHED and "status 3" in record.error


def test_garbage_result_is_a_crash(tmp_path):
    python = fake_python(tmp_path, """
        import json, sys
        open(json.load(open(sys.argv[3]))["result"], "w").write("{not json")
    """)
    assert run_trial(task(python)).state is TrialState.CRASHED


def test_hang_is_killed_at_the_time_limit_with_its_children(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    python = fake_python(tmp_path, f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(p.pid))
        time.sleep(600)
    """)
    t0 = time.monotonic()
    record = run_trial(task(python, timeout=2))
    assert record.state is TrialState.TIMEOUT and "2 s" in record.error
    assert time.monotonic() - t0 < 30
    grandchild = int(pidfile.read_text())
    # the whole process group went, not only the child
    wait_until(lambda: not running(grandchild), 30, "the timed-out child's grandchild has exited")


@pytest.mark.usefixtures("no_visible_gpu")   # the no-GPU path, on any machine
def test_real_child_without_gpu_reports_why(tmp_path):
    pytest.importorskip("torch")
    import torch

    record = run_trial(task(sys.executable))
    assert record.state is TrialState.CRASHED
    assert "no CUDA device" in record.error
    assert record.env.get("torch") == torch.__version__  # provenance is recorded even for a failed trial


def test_child_environment_sets_only_the_cuda_variable():
    env = child_environment(AllocConf.parse("max_split_size_mb:128"), 1,
                            base={"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PATH": "/bin"})
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"
    assert "PYTORCH_ALLOC_CONF" not in env  # a stray variable from the user's shell must not leak in
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    default = child_environment(AllocConf(), None, base={"PYTORCH_CUDA_ALLOC_CONF": "x"})
    assert "PYTORCH_CUDA_ALLOC_CONF" not in default


def test_run_trials_appends_each_trial_and_keeps_order_per_gpu(tmp_path):
    python = fake_python(tmp_path, """
        import json, sys
        spec = json.load(open(sys.argv[3]))
        json.dump({"state": "oom", "error": "CUDA out of memory"}, open(spec["result"], "w"))
    """)
    store = TrialStore(tmp_path / "trials.jsonl")
    tasks = [task(python, conf, r) for r in range(2) for conf in ("", "expandable_segments:True")]
    seen = []
    run_trials(tasks, [None, None], lambda t, rec: (store.append(rec), seen.append(rec.key)))
    assert sorted(seen) == sorted(t.key() for t in tasks)
    records = store.load()
    assert len(records) == 4 and all(r.state is TrialState.OOM for r in records)
    assert store.finished_keys() == {t.key() for t in tasks}


def test_ctrl_c_stops_the_children_in_flight(tmp_path):
    """A real interrupt: a driver process runs trials, gets SIGINT while a child sleeps; the child must not survive."""
    pidfile = tmp_path / "child.pid"
    python = fake_python(tmp_path, f"""
        import os, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
    """)
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        from alloctune.settings.conf import AllocConf
        from alloctune.trial.launch import run_trials
        from alloctune.trial.task import TrialTask
        w = {WORKLOAD!r}
        tasks = [TrialTask(w, "h", AllocConf(), r, {python!r}, "env", timeout_s=600) for r in range(3)]
        run_trials(tasks, [None], lambda t, r: None)
    """))
    proc = subprocess.Popen([sys.executable, str(driver)], stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
                            preexec_fn=hear_ctrl_c)
    child = int(wait_until(lambda: pidfile.exists() and pidfile.read_text(), 60, "the trial child wrote its pid"))
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert b"KeyboardInterrupt" in stderr
    wait_until(lambda: not running(child), 30, "the interrupted trial child has exited")


def test_gpu_index_maps_through_the_users_visible_devices():
    env = child_environment(AllocConf(), 1, base={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3"  # --gpus 1 = the second GPU this user may use, not physical GPU 1
