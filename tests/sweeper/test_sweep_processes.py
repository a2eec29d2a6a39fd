"""`alloctune sweep` as a process: SIGTERM, SIGKILL, a second sweep into a running folder. Real CLI processes on
a stand-in interpreter that answers the probe as a one-GPU machine and runs trials that start a grandchild and
hang, so every test has real children to lose."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pids import running
from standin import PROBE_AS_ONE_GPU
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def setup(tmp_path):
    """(command, environment, pid folder, temp folder): a sweep whose trials hang, each writing its pids."""
    pids, tmp = tmp_path / "pids", tmp_path / "tmp"
    pids.mkdir()
    tmp.mkdir()
    python = tmp_path / "gpu-python"
    probe = PROBE_AS_ONE_GPU.format(torch="2.13.0", python=sys.executable)
    head = "#!" + sys.executable + "\nimport json, os, subprocess, sys, time\n" + probe
    python.write_text(head + textwrap.dedent(f"""
        if os.path.exists({str(tmp_path / "finish-default")!r}) and not os.environ["PYTORCH_CUDA_ALLOC_CONF"]:
            spec = json.load(open(sys.argv[3]))   # the default's trial, told to finish: what a trial child writes
            peaks = dict(peak_reserved_bytes=2**30, peak_allocated_bytes=2**29, peak_requested_bytes=2**29,
                         num_alloc_retries=0, num_ooms=0, device_peak_used_bytes=2**30 + 2**28)
            json.dump(dict(state="ok", env={{}}, measurement=dict(peaks, throughput=1.0, unit="tokens")),
                      open(spec["result"], "w"))
        else:  # a trial: start a data-loader-like grandchild, then hang
            g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            open(os.path.join({str(pids)!r}, str(os.getpid())), "w").write(f"{{os.getpid()}} {{g.pid}}")
            time.sleep(600)
    """))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    workload = tmp_path / "w.yaml"
    workload.write_text("name: w\nkind: hpsearch\nunit: tokens\nsteps: 1\n")
    command = [sys.executable, "-m", "alloctune", "sweep", str(workload), "--python", str(python), "--conf",
               "expandable_segments:True", "--repeats", "1", "--backend", "cuda", "--results",
               str(tmp_path / "results")]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    return command, env, pids, tmp


def start(command, env, pids: Path) -> tuple[subprocess.Popen, list[int]]:
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    def written() -> list[int]:
        return [int(p) for f in pids.iterdir() for p in f.read_text().split()]

    wait_until(lambda: len(written()) >= 2, 60, "a trial started and wrote its pid and its grandchild's")
    family = written()
    assert len(family) == 2, family
    return sweep, family


def gone(pids: list[int], tmp: Path, timeout: float = 10) -> bool:
    try:
        wait_until(lambda: not any(map(running, pids)) and not list(tmp.glob("alloctune-trial-*")), timeout,
                   "every process of the trial exited and its temporary folder is gone")
        return True
    except AssertionError:
        for pid in pids:  # leave nothing behind when the test fails
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        return False


@pytest.mark.slow
def test_sigterm_stops_the_sweep_like_ctrl_c(setup, tmp_path):
    command, env, pids, tmp = setup
    sweep, family = start(command, env, pids)
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=30)
    assert sweep.returncode == 143
    # stopped during its first trial: nothing of this run is saved, and it says so; nor is a folder of it left
    assert b"terminated; no trial had finished; running the same command again starts the sweep" in stderr
    assert not (tmp_path / "results").exists()
    assert b"Traceback" not in stderr
    assert gone(family, tmp)


@pytest.mark.slow
def test_sigterm_after_a_finished_trial_says_it_is_saved(setup, tmp_path):
    command, env, pids, tmp = setup
    (tmp_path / "finish-default").write_text("")   # the default's trial ends; expandable segments' hangs
    sweep, family = start(command, env, pids)
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=30)
    assert sweep.returncode == 143
    assert b"terminated; finished trials are saved, run the same command again to resume" in stderr, stderr
    [folder] = (tmp_path / "results").iterdir()
    assert [line for line in (folder / "trials.jsonl").read_text().splitlines() if line.strip()] != []
    assert gone(family, tmp)
    # resumed, and stopped again before a trial of its own finished: the folder's trials are still saved, and said so
    for f in pids.iterdir():
        f.unlink()
    again, family = start(command, env, pids)
    again.send_signal(signal.SIGTERM)
    _, stderr = again.communicate(timeout=30)
    assert b"Resuming the sweep" in stderr and b"finished trials are saved, run the same command again" in stderr, \
        stderr
    assert folder.exists() and gone(family, tmp)


@pytest.mark.slow
def test_sigkill_of_the_sweep_takes_its_trials_and_their_children_along(setup):
    command, env, pids, tmp = setup
    sweep, family = start(command, env, pids)
    sweep.kill()
    sweep.wait()
    assert gone(family, tmp)


@pytest.mark.slow
def test_a_second_sweep_into_a_running_folder_is_refused(setup, tmp_path):
    command, env, pids, tmp = setup
    sweep, family = start(command, env, pids)
    try:
        [folder] = (tmp_path / "results").iterdir()
        for second in (command, command + ["--out", str(folder)]):  # resuming the newest, or named
            done = subprocess.run(second, env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 2, done.stderr
            assert "is being written by another alloctune sweep" in done.stderr
            assert "Traceback" not in done.stderr and done.stderr.count("alloctune: error:") == 1
        report = subprocess.run([sys.executable, "-m", "alloctune", "report", str(folder)], env=env,
                                capture_output=True, text=True, timeout=120)
        assert report.returncode == 2 and "is being written by another" in report.stderr
        # What to do instead, in report's own words: nothing of sweep's (--out, --fresh)
        assert f"alloctune report {folder}" in report.stderr and "--max-slowdown" in report.stderr
        assert "--out" not in report.stderr and "--fresh" not in report.stderr
        assert not (folder / "choice.json").exists()
        assert len(os.listdir(pids)) == 1  # no second trial started
    finally:
        sweep.kill()
        sweep.wait()
        gone(family, tmp)
