"""Runs trials, each in a fresh child process, and turns whatever happens into a `TrialRecord`.

The setting goes into the child's environment before torch is imported there; a crash, a hang (killed at the
time limit) or an OOM becomes the trial's state. Trials run in parallel, one per GPU, in the order given (the
caller interleaves repeats across settings: A B C A B C ...).
"""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .conf import AllocConf
from .errors import ResultsError
from .procs import kill_all, kill_group, spawn_group
from .records import Measurement, TrialRecord, TrialState
from .typed import from_json, load_json

PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # what a child needs on PYTHONPATH
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a trial time limit beyond this is a typo (and inf overflows the wait)


@dataclass(frozen=True)
class TrialTask:
    """One trial to run: what (workload, setting, repeat) and where (interpreter, environment id)."""

    workload: dict             # WorkloadSpec.to_dict()
    workload_hash: str
    conf: AllocConf
    repeat: int
    python: str
    env_id: str
    budget_bytes: int | None = None
    budget_fraction: float | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    record_trace: str | None = None   # path: record the allocation trace of this run as a snapshot pickle
    backend: str = "cuda"             # what its record will say: 'cuda' (measured) or 'sim' (replayed)

    def key(self) -> tuple:
        """The key its record will have (`TrialRecord.key`): a resumed sweep skips tasks already recorded."""
        key = (self.workload_hash, str(self.conf), self.env_id, self.backend, self.budget_bytes, self.repeat)
        return key + ("extra",) if self.extra else key

    @property
    def extra(self) -> bool:
        """A command's recording trial: recording covers the whole run, so it is not the default's repeat 0."""
        return self.record_trace is not None and bool(self.workload.get("command"))


def child_environment(conf: AllocConf, gpu: int | Sequence[int] | None, base: dict | None = None) -> dict:
    """The child's environment: our package importable, the setting under the variable every torch ≥ 2.1 reads
    first (a stray PYTORCH_ALLOC_CONF from the user's shell is removed so it cannot leak into the default)."""
    env = dict(os.environ if base is None else base)
    for var in ALLOC_CONF_VARS:
        env.pop(var, None)
    if not conf.is_default:
        env["PYTORCH_CUDA_ALLOC_CONF"] = str(conf)
    if gpu is not None:
        # --gpus indexes the devices this process sees: respect a CUDA_VISIBLE_DEVICES the user already set.
        # A trial given several GPUs (--gpus-per-trial) sees all of them.
        visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[g] if g < len(visible) else str(g)
                                               for g in ([gpu] if isinstance(gpu, int) else gpu))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_trial(task: TrialTask, gpu: int | Sequence[int] | None = None) -> TrialRecord:
    """Run one trial in a fresh process; never raises for anything the child does."""
    if task.workload.get("command"):
        from .command import run_command_trial

        return run_command_trial(task, gpu)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="alloctune-trial-") as tmp:
        result_path = os.path.join(tmp, "result.json")
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w", encoding="utf-8") as f:
            json.dump({"workload": task.workload, "workload_hash": task.workload_hash, "env_id": task.env_id,
                       "conf": str(task.conf), "budget_bytes": task.budget_bytes,
                       "budget_fraction": task.budget_fraction, "record_trace": task.record_trace,
                       "result": result_path}, f)
        t0 = time.monotonic()
        env = child_environment(task.conf, gpu)
        timed_out = False
        with spawn_group([task.python, "-m", "alloctune.child", spec_path], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, remove=[tmp]) as proc:
            try:
                _, stderr = proc.communicate(timeout=task.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(proc)
                _, stderr = proc.communicate()
            wall = time.monotonic() - t0
            result = _read_result(result_path)  # before the group's end, when the watchdog removes `tmp`
    fields = dict(_identity(task), wall_seconds=round(wall, 3), started_at=started, node=socket.gethostname(),
                  gpus=env.get("CUDA_VISIBLE_DEVICES"))
    tail = _tail(stderr)
    if timed_out:
        return TrialRecord(state=TrialState.TIMEOUT, error=f"killed after the {task.timeout_s:g} s time limit"
                           + (f"\n{tail}" if tail else ""), env=result.env if result else {}, **fields)
    if result is None:
        why = exit_reason(proc.returncode, "the trial process", " without writing a result")
        return TrialRecord(state=TrialState.CRASHED, error=why + (f"\n{tail}" if tail else ""), **fields)
    return TrialRecord(state=result.state, measurement=result.measurement, error=result.error,
                       effective_conf=result.effective_conf, env=result.env, **fields)


def lost_trial(task: TrialTask, reason: str, **fields) -> TrialRecord:
    """The record of a trial whose child never reported back because what ran it was lost (a Ray worker)."""
    return TrialRecord(state=TrialState.CRASHED, error=reason, **_identity(task), **fields)


def _identity(task: TrialTask) -> dict:
    """The record fields that say which trial this is."""
    return dict(workload=task.workload["name"], workload_hash=task.workload_hash, conf=str(task.conf),
                repeat=task.repeat, env_id=task.env_id, backend=task.backend, budget_bytes=task.budget_bytes,
                recording=task.record_trace is not None, extra=task.extra)


def stop_children() -> None:
    """Kill every trial child in flight in this process (and what it started), e.g. on Ctrl-C."""
    kill_all()


def run_trials(tasks: Iterable[TrialTask], gpus: Sequence[int | Sequence[int] | None],
               on_done: Callable[[TrialTask, TrialRecord], None]) -> None:
    """Run tasks in order, one at a time per GPU. `on_done` is called from this thread as each trial ends
    (so the caller appends it to the trials file at once and nothing is lost on an interrupt)."""
    todo: queue.Queue = queue.Queue()
    for task in tasks:
        todo.put(task)
    done: queue.Queue = queue.Queue()
    stop = threading.Event()

    def worker(gpu):
        while not stop.is_set():
            try:
                task = todo.get_nowait()
            except queue.Empty:
                return
            try:
                done.put((task, run_trial(task, gpu)))
            except BaseException as exc:  # a bug here must stop the sweep, not end this GPU's work silently
                done.put((task, exc))
                return

    threads = [threading.Thread(target=worker, args=(gpu,), daemon=True) for gpu in gpus]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads) or not done.empty():
            try:
                task, record = done.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(record, BaseException):
                raise record
            on_done(task, record)
    except BaseException:
        # Interrupted (Ctrl-C): the children run in their own sessions, so the terminal's signal does not reach
        # them; stop them rather than leave them holding GPUs. Their trials are not recorded and run on resume.
        stop.set()
        deadline = time.monotonic() + 10
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            stop_children()  # again each round: a worker may have started one just before `stop`
            time.sleep(0.05)
        raise


@dataclass(frozen=True)
class ChildResult:
    """What the trial child writes (`child.py`); a missing, garbled or mistyped file means the trial crashed."""

    state: TrialState
    measurement: Measurement | None = None
    error: str | None = None
    effective_conf: str | None = None
    env: dict[str, Any] = field(default_factory=dict)


def _read_result(path: str) -> ChildResult | None:
    try:
        return from_json(ChildResult, load_json(path), path)
    except (OSError, ResultsError):
        return None


def exit_reason(code: int | None, who: str, exited: str = "") -> str:
    """How process `who` ended: killed by a signal (a negative return code), or its exit status then `exited`."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} was killed by {name}"
    return f"{who} exited with status {code}{exited}"


def _tail(stderr: bytes | None, lines: int = 25) -> str:
    text = (stderr or b"").decode("utf-8", "replace").strip().splitlines()
    return "\n".join(text[-lines:])
