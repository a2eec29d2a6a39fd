"""Runs trials, each in a fresh child process, and turns whatever happens into a `TrialRecord`.

The setting goes into the child's environment before torch is imported there, the task into its `spec.json` and
its answer comes back in a result file (`child/exchange.py`: `ChildSpec`, `ChildResult`); a crash, a hang (killed
at the time limit) or an OOM becomes the trial's state. Trials run in parallel, one per GPU, in the order given (the
caller interleaves repeats across settings: A B C A B C ...).
"""
from __future__ import annotations

import os
import queue
import socket
import subprocess
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Iterable, Sequence

from ..child.exchange import SPEC_SCHEMA, ChildResult, ChildSpec, write_spec
from ..errors import ResultsError
from ..processes import kill_all, kill_group, spawn_group, temp_folder
from ..results.records import TrialRecord, TrialState
from ..results.typed import from_json, load_json
from ..workload.spec import WorkloadSpec
from .task import TrialTask, child_environment, exit_reason, identity_fields, stderr_tail


def run_trial(task: TrialTask, gpu: int | Sequence[int] | None = None) -> TrialRecord:
    """Run one trial in a fresh process; never raises for anything the child does."""
    if task.workload.get("command"):
        from .command import run_command_trial

        return run_command_trial(task, gpu)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with temp_folder("alloctune-trial-") as tmp:   # gone even if this process is killed at any moment
        result_path = os.path.join(tmp, "result.json")
        spec_path = write_spec(tmp, ChildSpec(
            SPEC_SCHEMA, WorkloadSpec.from_dict(task.workload), task.workload_hash, task.env_id, str(task.conf),
            result_path, task.budget_bytes, task.budget_fraction, task.record_trace))
        t0 = time.monotonic()
        env = child_environment(task.conf, gpu)
        timed_out = False
        err_path = os.path.join(tmp, "stderr")   # to a file, of which the tail is read: a job may print gigabytes
        with open(err_path, "wb") as err, spawn_group([task.python, "-m", "alloctune.child.main", spec_path],
                                                      env=env, stdout=subprocess.DEVNULL, stderr=err,
                                                      remove=[tmp]) as proc:
            deadline = t0 + task.timeout_s
            while True:
                # In slices: an interrupt that is only a flag, not a signal (Ray cancels a task with
                # _thread.interrupt_main), is seen between them, so a cancelled trial stops its child at once.
                try:
                    proc.wait(timeout=max(0.0, min(_WAIT_SLICE_S, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        timed_out = True
                        kill_group(proc)
                        proc.wait()
                        break
            wall = time.monotonic() - t0
            result = _read_result(result_path)  # before the group's end, when the watchdog removes `tmp`
            tail = stderr_tail(err_path)
    fields = dict(identity_fields(task), wall_seconds=round(wall, 3), started_at=started, node=socket.gethostname(),
                  gpus=env.get("CUDA_VISIBLE_DEVICES"))
    if timed_out:
        return TrialRecord(state=TrialState.TIMEOUT, error=f"killed after the {task.timeout_s:g} s time limit"
                           + (f"\n{tail}" if tail else ""), env=result.env if result else {}, **fields)
    if result is None:
        why = exit_reason(proc.returncode, "the trial process", " without writing a result")
        return TrialRecord(state=TrialState.CRASHED, error=why + (f"\n{tail}" if tail else ""), **fields)
    return TrialRecord(state=result.state, measurement=result.measurement, error=result.error,
                       effective_conf=result.effective_conf, env=result.env, **fields)


_WAIT_SLICE_S = 0.5


def lost_trial(task: TrialTask, reason: str, **fields) -> TrialRecord:
    """The record of a trial whose child never reported back because what ran it was lost (a Ray worker)."""
    return TrialRecord(state=TrialState.CRASHED, error=reason, **identity_fields(task), **fields)


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


def _read_result(path: str) -> ChildResult | None:
    try:
        return from_json(ChildResult, load_json(path), path)
    except (OSError, ResultsError):
        return None


