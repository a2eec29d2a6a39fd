"""Process groups that die with alloctune: real drivers killed with SIGKILL, real grandchildren."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from pids import cpu_seconds, running
from waiting import wait_until

from alloctune.processes import kill_group, spawn_group

ROOT = str(Path(__file__).resolve().parents[2])


def wait_for(path: Path, lines: int = 1, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(text := path.read_text().split()) >= lines:
            return [int(x) for x in text]
        time.sleep(0.05)
    raise AssertionError(f"{path} never got {lines} pids")


def family(pidfile: Path) -> list[str]:
    """A command that starts a grandchild (a data-loader worker, say), then both sleep; pids go to pidfile."""
    code = f"""
        import os, subprocess, sys, time
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(f"{{os.getpid()}} {{g.pid}}")
        time.sleep(600)
    """
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_kill_group_ends_the_grandchildren_too(tmp_path):
    pidfile = tmp_path / "pids"
    with spawn_group(family(pidfile)) as proc:
        pids = wait_for(pidfile, 2)
        assert all(map(running, pids))
    assert proc.returncode == -signal.SIGKILL
    wait_until(lambda: not any(map(running, pids)), 30, "the child and its grandchild have exited")
    kill_group(proc)  # again: harmless


def test_a_group_dies_with_its_parent_even_on_sigkill_and_its_folder_goes(tmp_path):
    pidfile, folder = tmp_path / "pids", tmp_path / "alloctune-trial-x"
    folder.mkdir()
    driver = textwrap.dedent(f"""
        import time
        from alloctune.processes import spawn_group
        spawn_group({family(pidfile)!r}, remove=[{str(folder)!r}])
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", driver], env=dict(os.environ, PYTHONPATH=ROOT))
    pids = wait_for(pidfile, 2)
    parent.kill()  # SIGKILL: the parent runs no clean-up code at all
    parent.wait()
    deadline = time.monotonic() + 10
    while (any(map(running, pids)) or folder.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(running, pids))
    assert not folder.exists()


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:  # the thread ended between the listing and the read
            pass
    return found


def test_replay_workers_die_with_a_killed_parent_and_release_its_stdout():
    """`alloctune replay ... | cat` must end when alloctune is killed: no orphaned worker holds the pipe."""
    # Every shipped trace, so that the replay lasts seconds (one trace takes about one with the compiled core, its
    # pools of workers coming and going within it).
    traces = sorted(str(p) for p in (Path(ROOT) / "workloads" / "traces").glob("*.xz"))
    parent = subprocess.Popen([sys.executable, "-m", "alloctune", "replay", *traces, "--min-memory", "--jobs", "2"],
                              env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)

    def at_work() -> list[int]:
        busy = [c for c in children(parent.pid) if running(c) and cpu_seconds(c) > 0]
        return busy if len(busy) >= 2 else []

    workers = wait_until(at_work, 120, "two of its workers are at work (running, and used CPU time)")
    parent.kill()
    reader = threading.Thread(target=parent.stdout.read, daemon=True)  # returns at EOF only: when no process
    reader.start()                                                     # holds the pipe's write end any more
    reader.join(10)
    assert parent.wait() == -signal.SIGKILL   # killed mid-replay, not finished first
    try:
        wait_until(lambda: not any(map(running, workers)), 30, "the killed replay's workers have exited")
    finally:
        for pid in filter(running, workers):  # clean up after a failure
            os.kill(pid, signal.SIGKILL)
    assert not reader.is_alive()
