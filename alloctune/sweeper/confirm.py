"""A hybrid sweep's trials after the replay, with `--repeats confirm` (the default): the GPU's driver-call costs
(`calibrate`: the folder's calibration.json, else the per-user store, else measured, in about 40 s), each
replayed setting's predicted speed, the plan (decide/confirm.py), one confirmation pair per environment (the
default, then the winner), and throughput rounds (execute.run_rounds) only for what the plan or the confirmation
sends there.

A resumed sweep reads the calibration and its trials back: its predictions and its plan are the same, so it runs
only what it lacks. With no recording trial (`--trace`), the default's first trial runs before the plan, as the
predictions need its time per step."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Collection

from ..decide.reasons import Reason
from ..decide.confirm import (SpeedPlan, confirmation_of, excess_driver_share, in_process, needs_rounds,
                              plan_speed)
from ..decide.rounds import Contention, Standing, trials_to_come
from ..decide.speed import SpeedPrediction, default_window, predictions, step_seconds
from ..decide.summary import SettingResult, summarize_settings
from ..errors import AlloctuneError
from ..report.words import sentence
from ..results.calibration import Calibration, read_calibration, write_calibration
from ..results.names import CALIBRATION_FILE
from ..results.folder import ResultsFolder, Skipped
from ..results.records import Backend, TrialRecord, TrialState, measured_env_id
from ..settings.conf import AllocConf, conf_label
from ..settings.switching import switch_strings
from ..trial.calibration import calibration_for
from ..trial.inprocess import alternate_env, block_steps
from ..trial.probe import ProbeResult
from ..trial.task import TrialTask
from .execute import Tally, execute, run_rounds
from .executors import Executor
from .options import SweepCallbacks, SweepOptions
from .plan import Plan

TaskFn = Callable[[str, AllocConf, int], TrialTask]


def folder_calibration(folder: ResultsFolder) -> Calibration | None:
    """The calibration a sweep in `folder` used (calibration.json), if it kept one."""
    path = folder.path / CALIBRATION_FILE
    return read_calibration(path) if path.exists() else None


def calibrate(folder: ResultsFolder, runner: Executor, probe: ProbeResult, gpu: int,
              notice: Callable[[str], None]) -> Calibration | None:
    """The GPU's calibration for this sweep: its folder's (a resumed sweep), else, where its trials run (`runner`),
    the per-user store's or one measured now (trial/calibration.py), copied into the folder with its provenance
    (GPU, driver, torch, host CPU). None, said, where it cannot be measured: no setting's speed is then predicted,
    and those that could win get rounds."""
    if (kept := folder_calibration(folder)) is not None:
        return kept
    try:
        calibration = runner.call(calibration_for, probe, gpu)
    except AlloctuneError as exc:
        notice(f"no driver-call costs for this GPU ({exc}): speed is not predicted, and the settings that could "
               f"win are measured in rounds")
        return None
    write_calibration(folder.path / CALIBRATION_FILE, calibration)
    return calibration


def run_confirmed(folder: ResultsFolder, plan: Plan, options: SweepOptions, planned: dict[str, list[AllocConf]],
                  task: TaskFn, named: Collection[str], callbacks: SweepCallbacks, tally: Tally) -> None:
    """Predict, plan, confirm, and run rounds where asked (see the module). `planned`: the settings replayed and the
    backend switches, per environment; `named`: the settings the user named (a backend switch is then measured)."""
    default, envs, slots = AllocConf(), sorted(planned), len(options.gpus or (0,))
    with plan.runner:
        records = folder.trials()
        if any(step_seconds(records, env) is None for env in envs):
            execute(folder, plan.runner, [_confirming(task(env, default, 0), peak=peak_step(records, env, ""))
                                          for env in envs], callbacks.progress)
        calibration = calibrate(folder, plan.runner, plan.probes[0], (options.gpus or (0,))[0], callbacks.notice)
        records = folder.trials()
        predicted = predictions(records, calibration)
        replayed = summarize_settings([r for r in records if r.backend == Backend.SIM], options.max_slowdown)
        plans = {env: plan_speed([s for s in replayed if measured_env_id(s.env_id) == env], predicted.get(env, {}),
                                 [str(c) for c in planned[env] if c.is_async], options.max_slowdown, named=named)
                 for env in envs}
        _record_skips(folder, plans)
        tasks = [(env, conf, task(env, AllocConf.parse(conf), 0))
                 for env in envs for conf in dict.fromkeys(["", plans[env].winner or ""])]
        pair = []
        for env, conf, t in tasks:
            peak = peak_step(records, env, conf)
            alternate = _alternate(env, conf, plan, records, replayed, predicted.get(env, {}).get(conf), t, peak)
            pair.append(_confirming(t, alternate, peak))
        for (env, conf, _), t in zip(tasks, pair):
            if (held := _held(t, default_window(records, env))) is not None:
                callbacks.notice(f"{conf_label(conf)}: its confirmation runs {held}, where its replay reached peak "
                                 f"reserved, so that the memory it measures covers the peak")
            share = excess_driver_share(predicted.get(env, {}).get(conf))
            if t.alternate:
                callbacks.notice(f"{conf_label(conf)}: to be confirmed against the default inside one process, "
                                 f"in blocks of {block_steps(t.alternate)} steps")
            elif conf and t.workload.get("command") and share is not None and _switchable(plan, env, conf):
                callbacks.notice(f"{conf_label(conf)}: to be confirmed by a pair of processes, not inside one: the "
                                 f"replay prices driver calls at {share:.1%} of a step, and a setting switched to "
                                 f"inside a running process allocates beside what it made before, so its calls would "
                                 f"not be its own")
        rounds = {env: [conf for conf, _ in p.rounds] for env, p in plans.items()}
        finished = folder.store.finished_keys()
        tally.expect(sum(t.key() not in finished for t in pair) + _to_come(rounds, options))
        execute(folder, plan.runner, pair, callbacks.progress, phase=callbacks.phase, what="confirming the winner")
        confirmed = folder.trials()   # read once: with the pairs, for every environment
        for env, p in plans.items():
            for conf, why in p.rounds:
                callbacks.notice(f"{conf_label(conf)}: measured in rounds: {sentence(why)}")
            said = _confirmation(confirmed, env, p.winner, predicted.get(env, {})) if p.winner else None
            if said is not None and needs_rounds(said):
                callbacks.notice(f"{conf_label(p.winner or '')}: {sentence(said)}; measuring it in rounds")
                rounds[env].append(p.winner or "")
        asked = {env: [default, *map(AllocConf.parse, confs)] for env, confs in rounds.items() if confs}
        if asked:
            callbacks.phase("running trials in rounds", None)
            run_rounds(folder, plan.runner, asked, task, options.rounds, options.time_budget_s, options.max_slowdown,
                       slots, callbacks.progress, callbacks.notice, tally)


def _confirming(task: TrialTask, alternate: str | None = None, peak: int = 0) -> TrialTask:
    """A confirmation trial: a command's may stop once warm-up and enough steady steps were timed, or, where it
    alternates with the default in one process (`alternate`), once its blocks time the ratio well enough; neither
    before step `peak`, where the replay of its setting reached its peak reserved (0: unknown)."""
    return (replace(task, early_stop=True, alternate=alternate, peak_step=peak) if task.workload.get("command")
            else task)


def _held(task: TrialTask, window: tuple[float, int] | None) -> str | None:
    """'to step N of M' (or 'to the job's end') where holding a confirmation to its replayed peak keeps it past the
    automatic window's earliest end (`TrialTask.held_past_window`), else None. M, the recording's steps, says how
    few are left after the peak for the speed."""
    if not task.held_past_window:
        return None
    if window is None:
        return f"to step {task.peak_step}"
    steps = task.warmup_steps + window[1]
    if task.peak_step > steps:   # past the recording's last step
        return "to the job's end (its replay peaked in the teardown)"
    return f"to step {task.peak_step} of {steps}"


def peak_step(records: list[TrialRecord], env: str, conf: str) -> int:
    """The step in which the replay of `conf` in environment `env` reached its peak reserved (its steps ended before
    the peak, plus one), 0 where no replay says (no step marks in the trace, a replay from before it was counted).
    A peak in the teardown gives the step after the last, which a confirmation never reaches: it runs to the end."""
    replay = next((r.measurement for r in records if r.backend == Backend.SIM and r.state is TrialState.OK
                   and measured_env_id(r.env_id) == env and r.conf == conf and r.measurement is not None), None)
    before = replay.steps_before_peak if replay is not None else None
    return 0 if before is None else before + 1


def _probe(plan: Plan, env: str) -> ProbeResult | None:
    return next((p for p in plan.probes if p.env_id == env), None)


def _switchable(plan: Plan, env: str, conf: str) -> bool:
    """Whether the environment's torch can switch `conf` and the default while the job runs."""
    probe = _probe(plan, env)
    return probe is not None and switch_strings(AllocConf.parse(conf), AllocConf(), probe.torch_version) is not None


def _alternate(env: str, conf: str, plan: Plan, records: list[TrialRecord], replayed: list[SettingResult],
               prediction: SpeedPrediction | None, task: TrialTask, peak: int) -> str | None:
    """ALLOCTUNE_HOOK_ALTERNATE for the winner's confirmation where it can run inside one process
    (decide/confirm.in_process), else None (a pair of processes). Its blocks begin after `peak`, the step of its
    replayed peak (`peak_step`), and end within half the trial's time limit, which also holds the job's start-up
    and warm-up."""
    probe = _probe(plan, env)
    default = next((s for s in replayed if measured_env_id(s.env_id) == env and s.is_default), None)
    window = default_window(records, env)
    if probe is None or default is None or window is None:
        return None
    waits = max(0, peak - task.warmup_steps)
    how = in_process(conf, probe.torch_version, default.fits, window[0], window[1], prediction, waits)
    if how is None:
        return None
    b = how.blocks
    return alternate_env(how.strings, b.block_steps, b.skip_steps, b.target, b.min_pairs, b.max_pairs,
                         min(b.max_seconds, task.timeout_s / 2))


def _confirmation(records: list[TrialRecord], env: str, winner: str,
                  predicted: dict[str, SpeedPrediction]) -> Reason | None:
    """The winner's confirmation against its prediction (None: none ran, or no prediction)."""
    gpu = [r for r in records if r.backend == Backend.CUDA and r.env_id == env]
    s = next((s for s in summarize_settings(gpu) if s.conf == winner), None)
    p = predicted.get(winner)
    return confirmation_of(s, p) if s is not None and p is not None else None


def _to_come(rounds: dict[str, list[str]], options: SweepOptions) -> int:
    """About how many trials the rounds the plan asks for run (`rounds.trials_to_come`): a native setting's memory
    is the replay's, a backend switch's is not known."""
    rows = [Standing(conf, Contention.NOT_MEASURED, memory_known=not AllocConf.parse(conf).is_async)
            for confs in rounds.values() for conf in confs]
    return trials_to_come(rows, options.max_slowdown, options.rounds) if rows else 0


def _record_skips(folder: ResultsFolder, plans: dict[str, SpeedPlan]) -> None:
    """Record in sweep.json why the plan left settings unmeasured (once: a resumed sweep finds them there)."""
    info = folder.info()
    listed = {(s.env_id, s.conf) for s in info.skipped}
    new = [Skipped(conf, env_id=env, why=why.record()) for env, p in plans.items() for conf, why in p.skipped
           if (env, conf) not in listed]
    if new:
        info.skipped.extend(new)
        folder.write_info(info)
