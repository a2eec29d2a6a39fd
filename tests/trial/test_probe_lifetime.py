"""The probe child dies with alloctune (issue 19): SIGKILL during start-up, while an interpreter is being probed,
leaves no `python -m alloctune.child.probe` running, nor anything that probe started."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from clirun import ROOT
from pids import running


def test_sigkill_while_probing_leaves_no_probe_behind(tmp_path):
    pids = tmp_path / "pids"
    python = tmp_path / "python3"
    # An interpreter whose probe hangs in its torch import (here: a sleep), after starting a child of its own.
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open({str(pids)!r} + ".tmp", "w") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}")
        os.replace({str(pids)!r} + ".tmp", {str(pids)!r})
        time.sleep(600)
    """))
    python.chmod(0o755)
    sweep = subprocess.Popen([sys.executable, "-m", "alloctune", "sweep", str(ROOT / "workloads" /
                              "transformer-packed.yaml"), "--preset", "h200", "--python", str(python), "--out",
                              str(tmp_path / "run")], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not pids.exists() and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.05)
    assert pids.exists(), "the probe never started"
    probe, grandchild = map(int, pids.read_text().split())
    assert running(probe) and running(grandchild)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait(timeout=30)
    deadline = time.monotonic() + 10
    while (running(probe) or running(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(probe) and not running(grandchild)
