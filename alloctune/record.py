"""Record a workload's allocation trace once (on a GPU), to replay it under any setting through the simulator.

A workload file runs in a trial child with torch's allocation history on (no stack frames); a user's own command
runs with `recorder/sitecustomize.py` first on its PYTHONPATH. Either way the result is a PyTorch snapshot pickle
with an `alloctune` key holding the measured peaks and the environment; other file names get the compact format.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .conf import AllocConf
from .errors import AlloctuneError, TraceError
from .probe import probe
from .runner import DEFAULT_TIMEOUT_S, TrialTask, child_environment, run_trial
from .sim.trace import Trace, load_trace, save_trace
from .workload import load_workload


def record_workload(workload: str | os.PathLike, output: str | os.PathLike, *, preset: str | None = None,
                    conf: str = "", gpu: int = 0, python: str | None = None,
                    timeout_s: float | None = None) -> Trace:
    spec = load_workload(workload, preset)
    target = probe(python or sys.executable)
    if not (target.cuda_available and target.device_count):
        raise AlloctuneError(f"recording needs a CUDA GPU, and {target.python} sees none")
    with tempfile.TemporaryDirectory(prefix="alloctune-record-") as tmp:
        snapshot = os.path.join(tmp, "snapshot.pickle")
        task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(conf), 0, target.python, target.env_id,
                         timeout_s=timeout_s or spec.timeout_s or DEFAULT_TIMEOUT_S, record_trace=snapshot)
        record = run_trial(task, gpu)
        if record.state.value != "ok" or not os.path.exists(snapshot):
            raise AlloctuneError(f"recording {spec.name} under {task.conf.label} failed "
                                 f"({record.state.value}): {record.error}")
        return _keep(snapshot, output)


def record_command(command: list[str], output: str | os.PathLike, *, gpu: int = 0, conf: str = "") -> Trace:
    """Run the user's command with allocation recording injected at interpreter start-up."""
    with tempfile.TemporaryDirectory(prefix="alloctune-record-") as tmp:
        snapshot = os.path.join(tmp, "snapshot.pickle")
        env = child_environment(AllocConf.parse(conf), gpu)
        recorder = str(Path(__file__).resolve().parent / "recorder")
        env["PYTHONPATH"] = os.pathsep.join([recorder, env["PYTHONPATH"]])
        env["ALLOCTUNE_RECORD_TO"] = snapshot
        code = subprocess.call(command, env=env)
        if code != 0:
            raise AlloctuneError(f"{command[0]} exited with status {code}: a trace of a failed run is not kept")
        if not os.path.exists(snapshot):
            raise AlloctuneError(f"{command[0]} exited with status {code} and recorded no trace: is it a Python "
                                 f"program that uses CUDA through torch?")
        return _keep(snapshot, output)


def _keep(snapshot: str, output) -> Trace:
    """Write the snapshot where the user asked: as is for .pickle/.pkl, else in the compact format."""
    output = Path(output)
    try:
        trace = load_trace(snapshot)
    except TraceError:
        # Keep what was recorded, so that a loader problem costs no second GPU run.
        output.with_name(output.name + ".raw.pickle").write_bytes(Path(snapshot).read_bytes())
        raise
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix in (".pickle", ".pkl"):
        output.write_bytes(Path(snapshot).read_bytes())
    else:
        save_trace(trace, output)
    return trace
