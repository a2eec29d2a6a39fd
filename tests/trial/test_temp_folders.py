"""A trial's (or a recording's) temporary folder never outlives alloctune (issue 19: the Ray Ctrl-C test sometimes
left an /tmp/alloctune-trial-* folder): a watchdog makes it and removes it, so a process killed at any moment, even
between the folder's creation and its first use, leaves none."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from alloctune.processes import temp_folder
from waiting import wait_until

ROOT = str(Path(__file__).resolve().parents[2])


def test_the_folder_is_there_in_the_block_and_gone_after_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with temp_folder("alloctune-trial-") as folder:
        assert Path(folder).parent == tmp_path and Path(folder).is_dir()
        (Path(folder) / "spec.json").write_text("{}")
    assert not Path(folder).exists()


def test_a_process_killed_at_any_moment_leaves_no_folder(tmp_path):
    """A driver that makes folder after folder is SIGKILLed at moments of its own choosing (mid-creation,
    in the block, at its end), again and again: none of its folders stays."""
    driver = textwrap.dedent("""
        from alloctune.processes import temp_folder
        while True:
            with temp_folder("alloctune-trial-") as folder:
                open(folder + "/spec.json", "w").write("{}")
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
    for delay in (0.3, 0.45, 0.6, 0.75, 0.9, 1.05):
        proc = subprocess.Popen([sys.executable, "-c", driver], env=env)
        time.sleep(delay)
        assert proc.poll() is None, "the driver died on its own"   # else no folder was ever at stake
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    wait_until(lambda: not list(tmp_path.glob("alloctune-trial-*")), 10, "the watchdogs removed every folder")


def test_record_killed_while_the_command_runs_leaves_no_folder(tmp_path):
    """`record -- COMMAND` runs on a machine without a GPU when the command is not a Python it can probe (here a
    shell): SIGKILLed while it runs, it leaves no /tmp/alloctune-record-* folder."""
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "alloctune", "record", "-o", str(tmp_path / "t.pickle"), "--",
                             "bash", "-c", "sleep 60"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: list(tmp_path.glob("alloctune-record-*")) or proc.poll() is not None, 60,
               "record made its folder (or exited)")
    assert list(tmp_path.glob("alloctune-record-*")), "record never made its folder"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_until(lambda: not list(tmp_path.glob("alloctune-record-*")), 10, "the watchdog removed the folder")
