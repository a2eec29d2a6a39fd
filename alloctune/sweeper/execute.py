"""Running planned trials: hand an executor the tasks the trials file lacks and append each record as it comes
back (`execute`); with `repeats` 'auto', round after round until each setting's answer is known (`run_rounds`).
The sweeper alone writes the trials file, so a resumed sweep runs only what is missing."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from ..decide.summary import summarize_settings
from ..decide.rounds import contenders
from ..results.folder import ResultsFolder, Skipped
from ..results.records import Backend, TrialRecord, TrialState
from ..settings.conf import AllocConf
from ..trial.task import TrialTask
from .executors import Executor
from .options import PhaseFn, ProgressFn


def execute(folder: ResultsFolder, executor: Executor, tasks: list[TrialTask], progress: ProgressFn | None,
            before: int = 0, later: int = 0, phase: PhaseFn | None = None, what: str = "") -> int:
    """Hand the tasks the trials file lacks to `executor` and append each record as it comes back (a resumed
    sweep runs only what is missing). A task the executor cannot run joins the sweep's skipped list, once: a
    resumed sweep leaves out what it skipped before.
    Progress counts `before` trials done earlier and up to `later` still to come; returns how many of `tasks`
    are done."""
    info = folder.info()
    # A resumed sweep neither counts nor retries what it skipped before (the skip is already on record).
    skipped = {(s.conf, s.env_id) for s in info.skipped}
    tasks = [t for t in tasks if (str(t.conf), t.env_id) not in skipped]
    finished = folder.store.finished_keys()
    todo = [t for t in tasks if t.key() not in finished]
    done, total = len(tasks) - len(todo), len(tasks)
    if phase:   # the bar starts with its count
        phase(what, (before + done, before + total + later))

    def on_done(task: TrialTask, record: TrialRecord) -> None:
        nonlocal done
        if reason := _foreign(record, info.envs.get(record.env_id)):
            record = replace(record, state=TrialState.CRASHED, error=reason)
        folder.store.append(record)
        done += 1
        if progress:
            progress(record, before + done, before + total + later)
        if task.workload.get("command"):
            from ..trial.command import check_measurable

            check_measurable(record)

    def on_skip(task: TrialTask, reason: str) -> None:
        # On record in sweep.json, which `outcome.skipped` and the sweep's closing lines give: no notice too.
        nonlocal total
        total -= 1
        info.skipped.append(Skipped(str(task.conf), reason, task.env_id))
        folder.write_info(info)

    executor.run(todo, on_done, on_skip)
    return done


def run_rounds(folder: ResultsFolder, executor: Executor, planned: dict[str, list[AllocConf]],
               task: Callable[[str, AllocConf, int], TrialTask], max_rounds: int, time_budget_s: float | None,
               max_slowdown: float, slots: int, progress: ProgressFn | None, notice: Callable[[str], None]) -> None:
    """`repeats` 'auto': round after round, the default and then the settings still in contention (rounds.py),
    until none is, or `max_rounds` or the time budget are spent. A round's default run also closes the previous
    round's bracket, so who is still in contention is decided after it, from bracketed pairs only; after the last
    round one more default run closes it. Each round is planned from everything recorded so far, so a resumed
    sweep takes the same path (and in a hybrid sweep the trial that recorded the trace, having the key of the
    default's repeat 0, is the first round's default). `slots`: trials the executor runs at once (for the time
    estimate)."""
    started, done, envs = time.monotonic(), 0, sorted(planned)
    default = AllocConf.parse("")
    for r in range(max_rounds + 1):
        done += execute(folder, executor, [task(env_id, default, r) for env_id in envs], progress, done)
        if r == max_rounds:
            break
        measured = summarize_settings([t for t in folder.trials() if t.backend == Backend.CUDA], max_slowdown)
        tasks = []
        for env_id in envs:
            by_conf = {str(c): c for c in planned[env_id]}
            group = [s for s in measured if s.env_id == env_id]
            tasks += [task(env_id, by_conf[conf], r) for conf in contenders(group, list(by_conf), r, max_slowdown)]
        if not tasks:
            break
        walls = [t.wall_seconds for t in folder.trials() if t.backend == Backend.CUDA and t.wall_seconds]
        # this round's settings, and the default's run that closes the round
        estimate = (sum(walls) / len(walls)) * (len(tasks) + len(envs)) / slots if walls else 0.0
        if time_budget_s is not None and r > 0 and time.monotonic() - started + estimate > time_budget_s:
            notice(f"the {time_budget_s:g} s time budget would run out during round {r + 1}: stopping after "
                   f"{r} rounds")
            break
        envs = sorted({t.env_id for t in tasks})
        done += execute(folder, executor, tasks, progress, done, len(tasks) * (max_rounds - r - 1) + 1)


def _foreign(record: TrialRecord, probed: dict | None) -> str | None:
    """Why a measured trial cannot count with its environment: it ran under another torch, or on another GPU model,
    than the probe of its interpreter saw (a cluster node set up differently). Statistics never mix those."""
    if not probed or record.backend != Backend.CUDA:
        return None
    torch, gpu = record.env.get("torch"), record.env.get("gpu")
    models = sorted({d.get("name") for d in probed.get("devices") or []} - {None})
    where = f" on {record.node}" if record.node else ""
    if torch and torch != probed.get("torch_version"):
        return f"ran under torch {torch}{where}, but {record.env_id} was probed as torch {probed.get('torch_version')}"
    if gpu and models and gpu not in models:
        return f"ran on {gpu}{where}, but {record.env_id} was probed on {', '.join(models)}"
    return None
