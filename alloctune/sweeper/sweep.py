"""A sweep's plan run (`run_plan`): the recording trial, the replays, the measured trials, each appended to the
trials file as it finishes, with how many GPU trials that takes told as it goes (`decide/estimate.py`).

`api/sweep.sweep()` is the flow around it: the options checked (options.py), what will run settled (plan.py), the
results folder opened or resumed (resume.py), this, then the decision. The trials run through execute.py (local
child processes, simulator replays, a Ray cluster), hybrid.py (recording, search) and confirm.py. The
sweeper alone appends what comes back to the trials file; choosing and reporting read the records back, so an
interrupted sweep resumes where it stopped and its reports are always built from what was really recorded.
"""
from __future__ import annotations

from dataclasses import replace

from ..decide.estimate import Asked, first_estimate
from ..decide.finalists import GpuPlan, finalists, gpu_plan
from ..results.folder import ResultsFolder
from ..results.records import Backend, TrialRecord
from ..settings.conf import AllocConf
from ..sim.trace import Trace
from ..trial.probe import ProbeResult
from ..trial.task import TrialTask
from ..units import budget_on
from ..workload.spec import DEFAULT_TIMEOUT_S, WorkloadSpec
from .execute import Tally, execute, run_rounds
from .executors import SimExecutor
from .confirm import run_confirmed
from .hybrid import dry_run_default, record_default, recording_task, search_plan
from .options import SweepCallbacks, SweepOptions
from .plan import Plan


def run_plan(folder: ResultsFolder, spec: WorkloadSpec, options: SweepOptions, plan: Plan,
             callbacks: SweepCallbacks, earlier: list[TrialRecord]) -> None:
    """The plan's trials (`earlier`: those a resumed folder holds), each appended to the trials file as it finishes:
    the default's first trial recording the trace (hybrid without one; with --dry-run, the command's dry run
    instead), the replays (sim, hybrid), then the measured trials (cuda; hybrid: the finalists). The estimate of the
    GPU trials is told before the first and kept current after each."""
    traces, planned = plan.traces, plan.planned
    tally = Tally(callbacks.estimate, len(options.gpus or (0,)), earlier)

    def progress(record: TrialRecord, done: int, total: int) -> None:
        tally.count(record)
        callbacks.progress(record, done, total)

    if plan.backend != Backend.SIM and not tally.done:
        asked = _asked(spec, options, plan, hybrid=plan.backend == Backend.HYBRID, recording=plan.recording,
                       search_to_run=options.search is not None)
        tally.expect(first_estimate(plan.planned.values(), asked))
    if plan.recording:
        task = recording_task(_measured(spec, options, AllocConf(), 0, plan.probes[0]), folder)
        traces = record_default(folder, task, lambda tasks: execute(folder, plan.runner, tasks, progress))
    elif plan.dry_run:
        callbacks.phase(f"dry run of the command (no GPU, for {plan.dry_run})", None)
        traces = dry_run_default(folder, spec, plan.dry_run, plan.probes[0].python, callbacks.notice)
    if traces:
        planned = _replay(folder, spec, options, plan, traces, callbacks)
    if plan.backend == Backend.HYBRID and options.confirm:
        probe_of = {p.env_id: p for p in plan.probes}
        run_confirmed(folder, plan, options, planned,
                      lambda env_id, conf, r: _measured(spec, options, conf, r, probe_of[env_id]),
                      _named(spec, options, plan), replace(callbacks, progress=progress), tally)
        return
    if plan.backend == Backend.HYBRID:
        planned = finalists(folder.trials(), planned, options.max_slowdown, options.finalists)
    if plan.backend in (Backend.CUDA, Backend.HYBRID):
        _measure(folder, spec, options, plan, planned, replace(callbacks, progress=progress), tally)


def dry_run_plan(folder: ResultsFolder, spec: WorkloadSpec, options: SweepOptions, plan: Plan) -> GpuPlan:
    """`sweep --dry-run`: what a hybrid sweep of the same command, asked the same, would run on the GPU after the
    same replays (decide/finalists.gpu_plan), counted as after them: a search has run, what it found was replayed."""
    asked = _asked(spec, options, plan, hybrid=True, recording=True, search_to_run=False)
    return gpu_plan(folder.trials(), options.max_slowdown, asked)


def _asked(spec: WorkloadSpec, options: SweepOptions, plan: Plan, hybrid: bool, recording: bool,
           search_to_run: bool) -> Asked:
    """What the count of GPU trials rests on (decide/estimate.py), for a sweep that is `hybrid`, `recording` and
    has a search still to run (`search_to_run`: Asked.searched, a search finds the settings its replay judges)."""
    return Asked(hybrid=hybrid, recording=recording, command=spec.command is not None, auto=options.auto,
                 confirm=options.confirm, rounds=options.rounds, finalists=options.finalists,
                 searched=search_to_run, named=bool(_named(spec, options, plan)),
                 max_slowdown=options.max_slowdown)


def _named(spec: WorkloadSpec, options: SweepOptions, plan: Plan) -> list[str]:
    """The settings the user named (--conf, --grid, the workload's grid:), as the grid holds them."""
    return [str(c) for c in plan.confs] if options.grid or spec.grid else []


def _replay(folder: ResultsFolder, spec: WorkloadSpec, options: SweepOptions, plan: Plan, traces: list[Trace],
            callbacks: SweepCallbacks) -> dict[str, list[AllocConf]]:
    """Replay the planned settings (with `search`: the Pareto front of a search of each torch's settings space)
    through the simulator; returns the settings replayed, per interpreter."""
    names = folder.info().trace_paths   # where each trace was read from, by rank
    # Each interpreter's torch decides which settings are valid (the probe); the simulator follows its allocator
    # where it runs the job, else the trace's torch (Plan.told, sim/target.py).
    targets = {p.env_id: plan.target(p, traces) for p in plan.probes}
    sim = SimExecutor(traces, names, {plan.replay_env_id(p): targets[p.env_id] for p in plan.probes},
                      callbacks.notice)
    budget = budget_on(*options.budget_limit, sim.device_memory)   # a fraction is of the recording's card
    planned = plan.planned
    if options.search is not None:   # the front, and the settings named beside the search that it did not find
        replay_id = {p.env_id: plan.replay_env_id(p) for p in plan.probes}   # as its replays' tables name the torch

        def progress(env_id: str, done: int, total: int, best: str) -> None:
            callbacks.search_progress(replay_id[env_id], done, total, best)

        found = search_plan(folder, plan.probes, targets, traces, device_memory=sim.device_memory,
                            budget_bytes=budget, max_settings=options.search, trace_names=names, progress=progress)
        planned = {env: found[env] + [c for c in planned[env] if c not in found[env]] for env in found}
    tasks = [TrialTask(spec.to_dict(), spec.digest(), conf, 0, p.python, plan.replay_env_id(p), budget,
                       backend=Backend.SIM)
             for p in plan.probes for conf in planned[p.env_id]]
    execute(folder, sim, tasks, callbacks.progress, phase=callbacks.phase, what="replaying settings")
    return planned


def _measure(folder: ResultsFolder, spec: WorkloadSpec, options: SweepOptions, plan: Plan,
             planned: dict[str, list[AllocConf]], callbacks: SweepCallbacks, tally: Tally) -> None:
    """The measured trials: `repeats` of each planned setting, interleaved (A B C A B C), or with 'auto' in
    rounds."""
    probe_of = {p.env_id: p for p in plan.probes}

    def task(env_id: str, conf: AllocConf, r: int) -> TrialTask:
        return _measured(spec, options, conf, r, probe_of[env_id])

    with plan.runner:
        if options.auto:
            callbacks.phase("running trials in rounds", None)
            run_rounds(folder, plan.runner, planned, task, options.rounds, options.time_budget_s,
                       options.max_slowdown, len(options.gpus or (0,)), callbacks.progress, callbacks.notice, tally)
        else:
            tasks = [task(p.env_id, conf, r)
                     for r in range(options.rounds) for p in plan.probes for conf in planned[p.env_id]]
            finished = folder.store.finished_keys()
            tally.expect(sum(t.key() not in finished for t in tasks))
            execute(folder, plan.runner, tasks, callbacks.progress, phase=callbacks.phase, what="running trials")


def _measured(spec: WorkloadSpec, options: SweepOptions, conf: AllocConf, repeat: int, p: ProbeResult) -> TrialTask:
    """The task of one measured trial of `conf` under the interpreter `p`."""
    budget_bytes, budget_fraction = options.budget_limit
    return TrialTask(spec.to_dict(), spec.digest(), conf, repeat, p.python, p.env_id, budget_bytes, budget_fraction,
                     options.timeout_s or spec.timeout_s or DEFAULT_TIMEOUT_S, check_growth=options.check_growth)
