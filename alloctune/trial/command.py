"""The user's own command as a workload: `alloctune sweep -- CMD ARGS...` and workload files with `command:`.

A command workload is a `WorkloadSpec` whose `command` holds a `CommandSpec.to_dict()`. Each trial
(`run_command_trial`, called by `launch.run_trial`) runs the command in a fresh process group with:

- the setting in PYTORCH_CUDA_ALLOC_CONF (`task.child_environment`: the variable every torch >= 2.1 reads first,
  see `versions.env_var_names`; any allocator variable inherited from the shell is removed), set before anything
  starts, so every process of the command, whatever it spawns, reads it;
- the start-up hook (`hook/sitecustomize.py`) first on PYTHONPATH: every Python process of the trial that
  initialises CUDA writes its own peaks to a per-process file, which this module reads back. The trial's peak is
  the maximum over processes; the per-process figures stay in `TrialRecord.processes`;
- its own GPUs (CUDA_VISIBLE_DEVICES) when the sweep gives each trial a set (--gpus-per-trial).

Throughput, in order of precedence: a --metric-regex over the command's output; the step marks of
`alloctune.step()` (units per second after the warm-up steps, summed over processes); else the run's wall time,
one run = one unit (as hyperfine measures a command).
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from ..errors import AlloctuneError
from ..processes import kill_group, spawn_group, temp_folder
from ..results.records import Measurement, TrialRecord, TrialState
from ..workload.command import CommandSpec, is_python
from .hook import HOOK_DIR
from .task import TrialTask, child_environment, exit_reason, identity_fields

NOTHING_TO_MEASURE = "nothing to measure"
TERM_GRACE_S = 10.0        # after SIGTERM at the time limit, time for the hook to write the peaks before SIGKILL
STDERR_LINES = 25


def hook_environment(env: dict, conf: str = "", budget_bytes: int | None = None,
                     budget_fraction: float | None = None, record: bool = False) -> dict:
    """`env` with the start-up hook first on PYTHONPATH and its settings (`run_command` adds the output folder)."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HOOK_DIR, env.get("PYTHONPATH")) if p)
    env["ALLOCTUNE_HOOK_CONF"] = conf
    for var in ("ALLOCTUNE_HOOK_BUDGET_BYTES", "ALLOCTUNE_HOOK_BUDGET_FRACTION", "ALLOCTUNE_HOOK_RECORD"):
        env.pop(var, None)
    if budget_bytes:
        env["ALLOCTUNE_HOOK_BUDGET_BYTES"] = str(budget_bytes)
    elif budget_fraction:
        env["ALLOCTUNE_HOOK_BUDGET_FRACTION"] = repr(budget_fraction)
    if record:
        env["ALLOCTUNE_HOOK_RECORD"] = "1"
    return env


@dataclass
class Run:
    """What happened to one run of a command: exit status, output files, per-process hook files."""

    returncode: int | None
    timed_out: bool
    wall_seconds: float
    stdout: str
    stderr: str
    processes: list[dict]


def run_command(argv: list[str], env: dict, cwd: str | None, timeout_s: float | None, workdir: str,
                capture: bool = True) -> Run:
    """Run `argv` in a fresh process group, output to files in `workdir` (or to ours, without `capture`), hook
    files in `workdir`/procs. At the time limit the group gets SIGTERM (the hook writes the peaks), then
    SIGKILL; stray processes of the group are killed when the command ends."""
    procs = os.path.join(workdir, "procs")
    os.makedirs(procs, exist_ok=True)
    out_path, err_path = os.path.join(workdir, "stdout"), os.path.join(workdir, "stderr")
    env = dict(env, ALLOCTUNE_HOOK_OUT=procs)
    t0 = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        # A guarded group (procs.py): it dies with alloctune even on SIGKILL, and Ctrl-C stops it.
        with spawn_group(argv, env=env, cwd=cwd, stdout=out if capture else None,
                         stderr=err if capture else None) as proc:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=TERM_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
            kill_group(proc)   # whatever is left of the group (hung ranks, children)
            proc.wait()
    wall = time.monotonic() - t0
    return Run(proc.returncode, timed_out, wall, out_path, err_path, read_processes(procs))


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def read_processes(folder: str) -> list[dict]:
    """The hook's per-process files, by pid; a torn or unreadable one is left out."""
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "proc-*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("devices"), list):
            out.append(data)
    return sorted(out, key=lambda p: (p.get("rank") is None, p.get("rank") or 0, p.get("pid") or 0))


def run_command_trial(task: TrialTask, gpu=None) -> TrialRecord:
    """One trial of a command workload; never raises for anything the command does."""
    command = CommandSpec.from_dict(task.workload["command"])
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    argv = list(command.argv)
    if is_python(argv[0]):
        argv[0] = task.python   # the sweep's interpreter (--python), which is the command's own by default
    base = {**os.environ, **command.env}
    with temp_folder("alloctune-cmd-") as tmp:   # gone even if this process is killed at any moment
        cwd = command.cwd
        env = hook_environment(child_environment(task.conf, gpu, base), str(task.conf), task.budget_bytes,
                               task.budget_fraction, record=task.record_trace is not None)
        if command.isolate_cwd:   # `python -m pkg.mod` still finds the modules of the folder it was started in
            env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], cwd or os.getcwd()])
            cwd = os.path.join(tmp, "cwd")
            os.makedirs(cwd)
        try:
            run = run_command(argv, env, cwd, task.timeout_s, tmp)
        except OSError as exc:   # vanished or lost its permission since the sweep checked it
            run = Run(None, False, 0.0, "", "", [])
            error: str | None = f"cannot run {argv[0]}: {exc.strerror or exc}"
        else:
            error = None
        fields = dict(identity_fields(task), wall_seconds=round(run.wall_seconds, 3), started_at=started,
                      node=socket.gethostname(), gpus=env.get("CUDA_VISIBLE_DEVICES"))
        record = _judge(run, command, task, error, fields)
        if task.record_trace and record.state is TrialState.OK:
            keep_peak_trace(os.path.join(tmp, "procs"), run.processes, task.record_trace)
    return record


def keep_peak_trace(procs: str, processes: list[dict], target: str) -> None:
    """Move the trace of the process that peaked (highest peak reserved) to `target`: a hybrid sweep searches
    on it. Ranks of one job are alike as a rule, and the finalists are measured on the GPU over every process."""
    traced = [p for p in processes if os.path.exists(os.path.join(procs, f"trace-{p.get('pid')}.pickle"))]
    if (peak := peak_row(process_rows(traced))) is not None:
        shutil.move(os.path.join(procs, f"trace-{peak['pid']}.pickle"), target)


def _judge(run: Run, command: CommandSpec, task: TrialTask, error: str | None, fields: dict) -> TrialRecord:
    tail = _tail(run.stderr)
    rows = process_rows(run.processes)
    cuda = [p for p in run.processes if p.get("cuda")]
    env = _env(run.processes)
    effective = next((p["effective_conf"] for p in cuda if p.get("effective_conf") is not None), None)
    common = dict(fields, env=env, effective_conf=effective, processes=rows or None)
    if error:
        return TrialRecord(state=TrialState.CRASHED, error=error, **common)
    measurement = _measurement(rows, run, command, task) if rows else None
    oom = next((p["oom_message"] for p in run.processes if p.get("oom_message")), None)
    if oom is None and (any(r["num_ooms"] for r in rows) or (run.returncode and _looks_oom(tail))):
        oom = _oom_line(tail) or "out of memory (torch counted an OOM)"
    if run.timed_out:
        return TrialRecord(state=TrialState.TIMEOUT, measurement=None, error=f"killed after the "
                           f"{task.timeout_s:g} s time limit (the whole process group)" + _with(tail), **common)
    if oom:
        return TrialRecord(state=TrialState.OOM, measurement=measurement, error=oom, **common)
    mismatch = next((p["mismatch"] for p in cuda if p.get("mismatch")), None)
    if mismatch:
        return TrialRecord(state=TrialState.MISMATCH, error=mismatch, **common)
    if run.returncode != 0:
        return TrialRecord(state=TrialState.CRASHED, error=exit_reason(run.returncode, "the command") + _with(tail), **common)
    if not cuda:
        return TrialRecord(state=TrialState.CRASHED, error=f"{NOTHING_TO_MEASURE}: the command ran and exited 0, "
                           f"but no Python process of it initialised CUDA through torch", **common)
    return TrialRecord(state=TrialState.OK, measurement=measurement, **common)


def process_rows(processes: list[dict]) -> list[dict]:
    """One row per (process, device it allocated on): what TrialRecord.processes keeps."""
    keep = ("peak_reserved_bytes", "peak_allocated_bytes", "peak_requested_bytes", "num_alloc_retries", "num_ooms",
            "device_peak_used_bytes", "overhead_bytes")
    return [{"pid": p.get("pid"), "rank": p.get("rank"), "device": d.get("device"),
             **{k: d.get(k) for k in keep}} for p in processes for d in p.get("devices", [])]


def peak_row(rows: list[dict]) -> dict | None:
    """The process (and device) with the highest peak reserved: the one that decides whether the job fits."""
    return max(rows, key=lambda r: r.get("peak_reserved_bytes") or 0, default=None)


def _measurement(rows: list[dict], run: Run, command: CommandSpec, task: TrialTask) -> Measurement:
    throughput, unit, seconds, steps = _throughput(run, command, task)

    def most(key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return max(values) if values else None

    return Measurement(
        peak_reserved_bytes=most("peak_reserved_bytes") or 0, peak_allocated_bytes=most("peak_allocated_bytes") or 0,
        peak_requested_bytes=most("peak_requested_bytes"),
        num_alloc_retries=sum(r.get("num_alloc_retries") or 0 for r in rows),
        num_ooms=sum(r.get("num_ooms") or 0 for r in rows), device_peak_used_bytes=most("device_peak_used_bytes"),
        throughput=throughput, unit=unit, measured_seconds=seconds, measured_steps=steps)


def _throughput(run: Run, command: CommandSpec, task: TrialTask):
    """(units per second, unit, seconds measured, steps measured)."""
    unit = task.workload["unit"]
    if command.metric_regex:
        values = metric_values(run.stdout, command.metric_regex) + metric_values(run.stderr, command.metric_regex)
        if not values:
            return None, unit, None, None
        kept = values[1:] if len(values) > 1 else values   # the first report includes the start-up
        return sum(kept) / len(kept), unit, None, len(kept)
    rate = step_rate([p.get("steps") or [] for p in run.processes], int(task.workload["warmup_steps"]))
    if rate is not None:
        return rate[0], unit if unit != "runs" else "units", rate[1], rate[2]
    return (1 / run.wall_seconds if run.wall_seconds > 0 else None), "runs", run.wall_seconds, 1


def step_rate(marks_per_process: list[list], warmup: int) -> tuple[float, float, int] | None:
    """(units/s summed over processes, longest window in seconds, steps in it) from `alloctune.step` marks:
    each process's window runs from the end of its last warm-up step to its last mark. None when no process
    marked more steps than its warm-up."""
    warmup = max(1, warmup)
    total, longest, steps = 0.0, 0.0, 0
    for marks in marks_per_process:
        if len(marks) <= warmup:
            continue
        start, end = marks[warmup - 1][0], marks[-1][0]
        if end <= start:
            continue
        total += sum(u for _, u in marks[warmup:]) / (end - start)
        longest, steps = max(longest, end - start), max(steps, len(marks) - warmup)
    return (total, longest, steps) if steps else None


def metric_values(path: str, pattern: str) -> list[float]:
    """Numbers the regex finds in a file, in order: group 'value', else group 1, else the match; commas allowed
    as thousands separators."""
    regex = re.compile(pattern)
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                for match in regex.finditer(line):
                    text = (match.groupdict().get("value") or (match.group(1) if regex.groups else match.group(0)))
                    try:
                        out.append(float(text.replace(",", "")))
                    except (TypeError, ValueError):
                        continue
    except OSError:
        pass
    return out


def _env(processes: list[dict]) -> dict:
    from .provenance import collect_env

    try:
        env = collect_env()
    except Exception:
        env = {}
    torch = next((p.get("torch_version") for p in processes if p.get("torch_version")), None)
    return {**env, **({"torch": torch} if torch else {})}


def _tail(path: str, lines: int = STDERR_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _with(tail: str) -> str:
    return f"\nlast lines of its stderr:\n{tail}" if tail else ""


def _looks_oom(text: str) -> bool:
    return "out of memory" in text.lower() or "OutOfMemoryError" in text


def _oom_line(text: str) -> str | None:
    return next((line.strip() for line in reversed(text.splitlines()) if _looks_oom(line)), None)


def check_measurable(record: TrialRecord) -> None:
    """Stop the sweep at the first trial of a command that never used CUDA: every other trial would be the same."""
    if record.state is TrialState.CRASHED and (record.error or "").startswith(NOTHING_TO_MEASURE):
        raise AlloctuneError(f"{record.error}; alloctune measures GPU memory, so there is {NOTHING_TO_MEASURE} "
                             f"(is it the right command, and does it see a GPU?)")
