"""The user's own command as a workload: `alloctune sweep -- CMD ARGS...` and workload files with `command:`.

A command workload is a `WorkloadSpec` whose `command` holds a `CommandSpec.to_dict()`. Each trial
(`run_command_trial`, called by `launch.run_trial`) runs the command in a fresh process group with:

- the setting in PYTORCH_CUDA_ALLOC_CONF (`task.child_environment`: the variable every torch >= 2.1 reads first,
  see `known.VARIABLES`; any allocator variable inherited from the shell is removed), set before anything
  starts, so every process of the command, whatever it spawns, reads it;
- the start-up hook (`hook/sitecustomize.py`) first on PYTHONPATH: every Python process of the trial that
  initialises CUDA writes its own peaks to a per-process file (`peaks.ProcessReport`), which this module reads
  back (`job.read_reports`). The trial's peak is the maximum over processes (`job.job_measurement`); the
  per-process figures stay in `TrialRecord.processes`;
- its own GPUs (CUDA_VISIBLE_DEVICES) when the sweep gives each trial a set (--gpus-per-trial).

Where the throughput comes from is `throughput.py`'s to decide (`timing`).

With a --steps window (the workload's `steps`), the hook ends every process that counts steps at the same step
count, after writing its report: such a trial is `ok` when the command then exits 0 (`ended_by_window`), its
memory covers the warm-up and the window, and `peak_rising` says whether peak reserved still rose in the window's
last fifth. A confirmation trial (`TrialTask.early_stop`) ends the same way at an automatic window, once its
steps after the warm-up time the rate well enough (`runtime/stopping.py`): `auto_window` says its memory is
confirmed for the steps it ran; a job whose steps the hook does not see runs whole.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from ..errors import AlloctuneError, ResultsError
from ..files import copy_whole
from ..processes import kill_group, spawn_group, temp_folder
from ..results.records import Measurement, TrialRecord, TrialState, process_row
from ..runtime.alternate import VARIABLE as ALTERNATE_VARIABLE
from ..runtime.hook import HOOK_DIR
from ..runtime.oom import is_oom_text, oom_line
from ..runtime.peaks import DevicePeaks, ProcessReport
from ..workload.command import CommandSpec, is_python
from ..workload.spec import DEFAULT_WARMUP_STEPS
from .features import job_features
from .job import Run, job_measurement, read_reports, rising, traced
from .inprocess import alternated
from .task import TrialTask, child_environment, exit_reason, identity_fields, stderr_tail
from .throughput import Timing, timing

NOTHING_TO_MEASURE = "nothing to measure"
TERM_GRACE_S = 10.0        # after SIGTERM at the time limit, time for the hook to write the peaks before SIGKILL


def hook_environment(env: dict, conf: str = "", budget_bytes: int | None = None,
                     budget_fraction: float | None = None, record: bool = False,
                     warmup_steps: int = DEFAULT_WARMUP_STEPS, window_steps: int = 0, step_on: str | None = None,
                     growth_steps: int | None = None, early_stop: bool = False, peak_step: int = 0) -> dict:
    """`env` with the start-up hook first on PYTHONPATH and its settings (`run_command` adds the output folder,
    ALLOCTUNE_HOOK_OUT): the setting asked for (ALLOCTUNE_HOOK_CONF, checked against the one in force), the budget
    (ALLOCTUNE_HOOK_BUDGET_BYTES or _FRACTION), recording (ALLOCTUNE_HOOK_RECORD=1), the warm-up steps
    (ALLOCTUNE_HOOK_WARMUP_STEPS), the --steps window (ALLOCTUNE_HOOK_WINDOW_STEPS; 0: none), what --step-on counts
    (ALLOCTUNE_HOOK_STEP_ON), the steps K at which (and at 2K) the growth check samples memory
    (ALLOCTUNE_HOOK_GROWTH_STEPS), the automatic window of a confirmation (ALLOCTUNE_HOOK_EARLY_STOP=1:
    `runtime/stopping.py`) and the step before whose end it may not stop (ALLOCTUNE_HOOK_PEAK_STEP)."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HOOK_DIR, env.get("PYTHONPATH")) if p)
    env["ALLOCTUNE_HOOK_CONF"] = conf
    env["ALLOCTUNE_HOOK_WARMUP_STEPS"] = str(warmup_steps)
    for var in ("ALLOCTUNE_HOOK_BUDGET_BYTES", "ALLOCTUNE_HOOK_BUDGET_FRACTION", "ALLOCTUNE_HOOK_RECORD",
                "ALLOCTUNE_HOOK_WINDOW_STEPS", "ALLOCTUNE_HOOK_STEP_ON", "ALLOCTUNE_HOOK_GROWTH_STEPS",
                "ALLOCTUNE_HOOK_EARLY_STOP", "ALLOCTUNE_HOOK_PEAK_STEP", "ALLOCTUNE_HOOK_DRYRUN",
                ALTERNATE_VARIABLE):
        env.pop(var, None)
    if budget_bytes:
        env["ALLOCTUNE_HOOK_BUDGET_BYTES"] = str(budget_bytes)
    elif budget_fraction:
        env["ALLOCTUNE_HOOK_BUDGET_FRACTION"] = repr(budget_fraction)
    if record:
        env["ALLOCTUNE_HOOK_RECORD"] = "1"
    if window_steps:
        env["ALLOCTUNE_HOOK_WINDOW_STEPS"] = str(window_steps)
    if step_on:
        env["ALLOCTUNE_HOOK_STEP_ON"] = step_on
    if growth_steps:
        env["ALLOCTUNE_HOOK_GROWTH_STEPS"] = str(growth_steps)
    if early_stop:
        env["ALLOCTUNE_HOOK_EARLY_STOP"] = "1"
    if peak_step:
        env["ALLOCTUNE_HOOK_PEAK_STEP"] = str(peak_step)
    return env


STDERR_FD = 2


def run_command(argv: list[str], env: dict, cwd: str | None, timeout_s: float | None, workdir: str,
                capture: bool = True) -> Run:
    """Run `argv` in a fresh process group, output to files in `workdir` (or, without `capture`, to file descriptor
    2, both streams: our standard output carries alloctune's own results, `record --json` and `fit --json`, which
    the job's prints would corrupt; the descriptor, since a notebook's sys.stderr has none), hook files in
    `workdir`/procs. At the time limit the group gets SIGTERM (the hook writes the peaks), then SIGKILL; stray
    processes of the group are killed when the command ends."""
    procs = os.path.join(workdir, "procs")
    os.makedirs(procs, exist_ok=True)
    out_path, err_path = os.path.join(workdir, "stdout"), os.path.join(workdir, "stderr")
    env = dict(env, ALLOCTUNE_HOOK_OUT=procs)
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        # A guarded group (processes.py): it dies with alloctune even on SIGKILL, and Ctrl-C stops it.
        with spawn_group(argv, env=env, cwd=cwd, stdout=out if capture else STDERR_FD,
                         stderr=err if capture else None) as proc:
            timed_out = _wait(proc, timeout_s)
            kill_group(proc)   # whatever is left of the group (hung ranks, children)
            proc.wait()
    wall = time.monotonic() - t0
    try:
        processes, damage = read_reports(procs), None
        features = job_features(procs, processes)
    except ResultsError as exc:
        processes, damage, features = [], str(exc), None
    return Run(proc.returncode, timed_out, wall, out_path, err_path, processes, damage, features)


def _wait(proc: subprocess.Popen, timeout_s: float | None) -> bool:
    """Wait for the command; at the time limit, SIGTERM to its group and a grace period. True if it timed out."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_command_trial(task: TrialTask, gpu: int | Sequence[int] | None = None) -> TrialRecord:
    """One trial of a command workload; never raises for anything the command does."""
    command = CommandSpec.from_dict(task.workload["command"])
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    argv = list(command.argv)
    if is_python(argv[0]):
        argv[0] = task.python   # the sweep's interpreter (--python), which is the command's own by default
    with temp_folder("alloctune-cmd-") as tmp:   # gone even if this process is killed at any moment
        env, cwd = _trial_environment(task, command, gpu, tmp)
        try:
            run = run_command(argv, env, cwd, task.timeout_s, tmp)
        except OSError as exc:   # vanished or lost its permission since the sweep checked it
            run = Run(None, False, 0.0, "", "", [])
            error: str | None = f"cannot run {argv[0]}: {exc.strerror or exc}"
        else:
            error = run.damage
        fields = dict(identity_fields(task), wall_seconds=round(run.wall_seconds, 3), started_at=started,
                      node=socket.gethostname(), gpus=env.get("CUDA_VISIBLE_DEVICES"))
        record = _judge(run, command, task, error, fields)
        if task.record_trace and record.state is TrialState.OK:
            keep_traces(os.path.join(tmp, "procs"), run.processes, task.record_trace)
    return record


def _trial_environment(task: TrialTask, command: CommandSpec, gpu: int | Sequence[int] | None,
                       tmp: str) -> tuple[dict, str | None]:
    """The command's environment (its setting, GPUs and the hook) and working folder: its own, or a new empty
    one in `tmp` with --isolate-cwd."""
    base = {**os.environ, **command.env}
    env = hook_environment(child_environment(task.conf, gpu, base), str(task.conf), task.budget_bytes,
                           task.budget_fraction, record=task.record_trace is not None,
                           warmup_steps=int(task.workload["warmup_steps"]), window_steps=int(task.workload["steps"]),
                           step_on=command.step_on, early_stop=task.early_stop, peak_step=task.peak_step)
    if task.alternate:
        env[ALTERNATE_VARIABLE] = task.alternate
    if not command.isolate_cwd:
        return env, command.cwd
    # `python -m pkg.mod` still finds the modules of the folder it was started in
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], command.cwd or os.getcwd()])
    cwd = os.path.join(tmp, "cwd")
    os.makedirs(cwd)
    return env, cwd


def keep_traces(procs: str, processes: list[ProcessReport], target: str) -> None:
    """Move every traced process's trace to `target`, or beside it named by rank for several (`trace_targets`): a
    hybrid sweep replays each, as the ranks of one job differ (each draws its own data: on the H200 the rank that
    peaked changed with the setting) and the job fits only where every rank fits."""
    for trace, path in traced(procs, processes, Path(target)):
        copy_whole(trace, path)   # whole or not at all, also from a temporary folder on another file system


def _judge(run: Run, command: CommandSpec, task: TrialTask, error: str | None, fields: dict) -> TrialRecord:
    tail = stderr_tail(run.stderr)
    rows = process_rows(run.processes)
    devices = [d for p in run.processes for d in p.devices]
    cuda = [p for p in run.processes if p.cuda]
    effective = next((p.effective_conf for p in cuda if p.effective_conf is not None), None)
    common = dict(fields, env=_env(run.processes), effective_conf=effective, processes=rows or None,
                  features=run.features)
    if error:
        return TrialRecord(state=TrialState.CRASHED, error=error, **common)
    timed = timing(run, command, task.workload)
    measurement = _measurement(devices, timed, run.processes, task) if devices else None
    oom = next((p.oom_message for p in run.processes if p.oom_message), None)
    if oom is None and (any(d.num_ooms for d in devices) or (run.returncode and is_oom_text(tail))):
        oom = oom_line(tail) or "out of memory (torch counted an OOM)"
    if run.timed_out:
        return TrialRecord(state=TrialState.TIMEOUT, measurement=None, error=f"killed after the "
                           f"{task.timeout_s:g} s time limit (the whole process group)" + _with(tail), **common)
    if oom:
        return TrialRecord(state=TrialState.OOM, measurement=measurement, error=oom, **common)
    mismatch = next((p.mismatch for p in cuda if p.mismatch), None)
    if mismatch:
        return TrialRecord(state=TrialState.MISMATCH, error=mismatch, **common)
    if run.returncode != 0:
        return TrialRecord(state=TrialState.CRASHED, error=exit_reason(run.returncode, "the command",
                                                                       _after_window(run.processes)) + _with(tail),
                           **common)
    if not cuda:
        return TrialRecord(state=TrialState.CRASHED, error=f"{NOTHING_TO_MEASURE}: the command ran and exited 0, "
                           f"but no Python process of it initialised CUDA through torch", **common)
    return TrialRecord(state=TrialState.OK, measurement=measurement, error=timed.problem, **common)


def _after_window(processes: list[ProcessReport]) -> str:
    ended = sum(p.window_ended for p in processes)
    return (f", after its --steps window ended {ended} of its processes (a launcher that waits for results of the "
            f"processes it started may fail when they stop early)") if ended else ""


def _measurement(devices: list[DevicePeaks], timed: Timing, processes: list[ProcessReport],
                 task: TrialTask) -> Measurement:
    """The trial's measurement: its processes' peaks, its throughput and where it came from, and its window (held
    to the step of its replayed peak, where the task asked)."""
    rises = [r for p in processes if p.window_ended and (r := rising(p.window_reserved)) is not None]
    measured = replace(job_measurement(devices, timed.throughput, timed.unit, timed.seconds, timed.steps),
                       throughput_source=timed.source, ended_by_window=any(p.window_ended for p in processes),
                       auto_window=any(p.auto_window for p in processes), peak_rising=any(rises) if rises else None,
                       held_to_step=task.peak_step if task.early_stop and task.peak_step else None)
    return alternated(measured, processes)


def process_rows(processes: list[ProcessReport]) -> list[dict]:
    """One row per (process, device it allocated on): what TrialRecord.processes keeps."""
    return [process_row(p.pid, p.rank, d.device, d) for p in processes for d in p.devices]


def _env(processes: list[ProcessReport]) -> dict:
    from ..child.provenance import collect_env

    try:
        env = collect_env()
    except Exception:
        env = {}
    torch = next((p.torch_version for p in processes if p.torch_version), None)
    return {**env, **({"torch": torch} if torch else {})}


def _with(tail: str) -> str:
    return f"\nlast lines of its stderr:\n{tail}" if tail else ""


def check_measurable(record: TrialRecord) -> None:
    """Stop the sweep at the first trial of a command that never used CUDA: every other trial would be the same."""
    if record.state is TrialState.CRASHED and (record.error or "").startswith(NOTHING_TO_MEASURE):
        raise AlloctuneError(f"{record.error}; alloctune measures GPU memory, so there is {NOTHING_TO_MEASURE} "
                             f"(is it the right command, and does it see a GPU?)")
