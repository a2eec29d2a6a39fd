"""Running planned trials: hand an executor the tasks the trials file lacks and append each record as it comes
back (`execute`); with `repeats` 'auto', round after round until each setting's answer is known (`run_rounds`).
The sweeper alone writes the trials file, so a resumed sweep runs only what is missing."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Iterable

from ..decide.parameters import DEFAULT_TIE
from ..decide.reasons import Code, Reason
from ..decide.quoted import BackendSkipped, Unmeasured
from ..decide.rounds import Contention, Standing, contenders, over_time_budget, standings, trials_to_come
from ..decide.summary import SettingResult, summarize_settings
from ..results.folder import ResultsFolder, Skipped
from ..results.records import Backend, TrialRecord, TrialState, measured_env_id
from ..settings.conf import AllocConf
from ..trial.task import TrialTask
from .executors import Executor
from .options import Estimate, EstimateFn, PhaseFn, ProgressFn


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


class Tally:
    """The sweep's GPU trials as they finish, and the estimate of how many it runs in all (`expect`, from
    `rounds.trials_to_come`), told through `estimate`. `slots`: trials the executor runs at once."""

    def __init__(self, estimate: EstimateFn, slots: int, earlier: Iterable[TrialRecord] = ()):
        self._estimate, self._slots = estimate, max(1, slots)
        self.walls = [r.wall_seconds or 0.0 for r in earlier if r.backend != Backend.SIM]
        self.expected = len(self.walls)

    @property
    def done(self) -> int:
        return len(self.walls)

    def expect(self, more: int) -> None:
        """`more` trials to come after those done."""
        self.expected = self.done + more
        self._tell()

    def count(self, record: TrialRecord) -> None:
        if record.backend != Backend.SIM:
            self.walls.append(record.wall_seconds or 0.0)
            self._tell()

    def _tell(self) -> None:
        trials = max(self.expected, self.done)
        if not self.done:
            self._estimate(Estimate(trials, 0))
            return
        mean = sum(self.walls) / self.done
        self._estimate(Estimate(trials, self.done, sum(self.walls) / self._slots,
                                (trials - self.done) * mean / self._slots))


def run_rounds(folder: ResultsFolder, executor: Executor, planned: dict[str, list[AllocConf]],
               task: Callable[[str, AllocConf, int], TrialTask], max_rounds: int, time_budget_s: float | None,
               max_slowdown: float, slots: int, progress: ProgressFn | None, notice: Callable[[str], None],
               tally: Tally | None = None) -> None:
    """`repeats` 'auto': round after round, the default and then the settings still in contention (rounds.py),
    until none is, or `max_rounds` or the time budget are spent. A round's default run also closes the previous
    round's bracket, so who is still in contention is decided after it, from bracketed pairs only; after the last
    round one more default run closes it. Each round is planned from everything recorded so far, and a round that
    its next default run already closed adds nothing, so a resumed sweep goes on where the cut one was (in a
    hybrid workload sweep the trial that recorded the trace, having the key of the default's repeat 0, is the
    first round's default, a command's is an extra one; the replays' peaks are the memory the rounds start from).
    `slots`: trials the executor runs at once (for the time estimate). Settings the rounds never measured, and
    why, join the sweep's skipped list at the end."""
    started, done, envs = time.monotonic(), 0, sorted(planned)
    default = AllocConf()
    predicted = _predictions(folder.trials())
    final: dict[str, list[Standing]] = {}
    left = 0    # trials still expected after those run so far: the progress bar's total counts them
    for r in range(max_rounds + 1):
        done += execute(folder, executor, [task(env_id, default, r) for env_id in envs], progress, done,
                        max(0, left - len(envs)))
        if r == max_rounds:
            break
        gpu = [t for t in folder.trials() if t.backend == Backend.CUDA]   # the file read once a round
        measured, finished = summarize_settings(gpu, max_slowdown), {t.key for t in gpu}
        tasks, to_come, closed = [], 0, []
        for env_id in envs:
            by_conf = {str(c): c for c in planned[env_id]}
            group, ahead = [s for s in measured if s.env_id == env_id], predicted.get(env_id, {})
            final[env_id] = standings(group, planned[env_id], max_slowdown, DEFAULT_TIE, ahead, max_rounds=max_rounds)
            # a resumed sweep passes rounds it ran before: what is left counts from the furthest round measured
            ran = max((st.rounds for st in final[env_id]), default=0)
            to_come += trials_to_come(final[env_id], max_slowdown, max(1, max_rounds - max(r, ran)))
            if task(env_id, default, r + 1).key() in finished:
                # a resumed sweep passing a round that its next default already closed: a setting that came into
                # contention since would run far from the default runs it is paired with, so it waits for an
                # open round, as it did in the sweep before the cut
                closed.append(env_id)
                continue
            tasks += [task(env_id, by_conf[conf], r)
                      for conf in contenders(group, planned[env_id], max_slowdown, DEFAULT_TIE, ahead,
                                             max_rounds=max_rounds)]
        if tally is not None:
            tally.expect(to_come)
        if not tasks and not closed:
            break
        walls = [t.wall_seconds for t in gpu if t.wall_seconds]
        # this round's settings, and the default's run that closes the round
        if over_time_budget(time_budget_s, time.monotonic() - started, r, walls, len(tasks) + len(envs), slots):
            notice(f"the {time_budget_s:g} s time budget would run out during round {r + 1}: stopping after "
                   f"{r} rounds")
            break
        envs = sorted({t.env_id for t in tasks} | set(closed))
        left = max(0, to_come - len(tasks))
        done += execute(folder, executor, tasks, progress, done, left)
    _unmeasured(folder, final)


def _predictions(records: list[TrialRecord]) -> dict[str, dict[str, SettingResult]]:
    """The replays' results (a hybrid sweep's), per measured environment and setting: the memory the rounds start
    from. A replay's figure is a prediction for the native allocator only: the simulator does not run the rest."""
    out: dict[str, dict[str, SettingResult]] = {}
    for s in summarize_settings([r for r in records if r.backend == Backend.SIM]):
        out.setdefault(measured_env_id(s.env_id), {})[s.conf] = s
    return out


def _unmeasured(folder: ResultsFolder, final: dict[str, list[Standing]]) -> None:
    """Record in sweep.json why the rounds left a planned setting unmeasured (its memory was predicted)."""
    ran = {(t.env_id, t.conf) for t in folder.trials() if t.backend == Backend.CUDA}
    info = folder.info()
    listed = {(s.env_id, s.conf) for s in info.skipped}
    new = [Skipped(st.conf, env_id=env_id, why=why.record()) for env_id, rows in final.items() for st in rows
           if (env_id, st.conf) not in ran | listed and (why := unmeasured_reason(st)) is not None]
    if new:
        info.skipped.extend(new)
        folder.write_info(info)


def unmeasured_reason(st: Standing, tie: float = DEFAULT_TIE) -> Reason | None:
    """Why memory first left a setting unmeasured, as a reason (None: it was not memory)."""
    if st.why is Contention.BACKEND_SKIPPED and st.winner is not None:
        return Reason(Code.BACKEND_SKIPPED, BackendSkipped(st.winner, st.memory_bytes or 0, st.other_bytes or 0, tie,
                                                           st.predicted))
    if st.why in (Contention.LOSES_ON_MEMORY, Contention.MORE_MEMORY) and st.measure is not None:
        return Reason(Code.LOSES_ON_MEMORY, Unmeasured(st.measure, st.memory_bytes or 0, st.winner or "",
                                                       st.other_bytes or 0, tie, st.predicted))
    return None


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
