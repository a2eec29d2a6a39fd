"""`sweep()`: workload -> options -> plan -> executor -> records -> choice -> reports; `analyze()`: the last two again.

The Python API behind `alloctune sweep`, and its top-level flow: the options checked (options.py), what will run
settled (plan.py: interpreters probed, backend resolved, settings each torch accepts, the trace), the results
folder opened or resumed (resume.py), the trials run (execute.py: local child processes, simulator replays, a Ray
cluster; hybrid.py: recording, search). The sweeper alone appends what comes back to the trials file;
choosing and reporting read the records back, so an interrupted sweep resumes where it stopped and its reports are
always built from what was really recorded.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from typing import Any

from ..decide.choice import Choice
from ..decide.estimate import Asked, first_estimate
from ..decide.summary import SettingResult
from ..decide.decision import decide
from ..decide.finalists import finalists
from ..decide.parameters import check_max_slowdown
from ..report.analysis import write_folder
from ..results.folder import ResultsFolder, Skipped, results_folder
from ..results.records import Backend, TrialRecord, sim_env_id
from ..settings.conf import AllocConf
from ..sim.trace import Trace
from ..trial.probe import ProbeResult
from ..trial.task import TrialTask
from ..units import budget_on
from ..workload.loader import load_workload
from ..workload.spec import DEFAULT_TIMEOUT_S, WorkloadSpec
from .execute import Tally, execute, run_rounds
from .executors import SimExecutor
from .confirm import folder_calibration, run_confirmed
from .hybrid import record_default, recording_task, search_plan
from .options import SweepCallbacks, SweepOptions, from_arguments
from .plan import Plan, make_plan, sweep_info
from .resume import open_folder


@dataclass
class SweepOutcome:
    folder: ResultsFolder
    settings: list[SettingResult]
    choices: list[Choice]
    skipped: list[Skipped]
    backend: str


def sweep(workload: str | os.PathLike | WorkloadSpec, options: SweepOptions | None = None, *,
          callbacks: SweepCallbacks | None = None, **fields: Any) -> SweepOutcome:
    """Sweep a grid of allocator settings over a workload and choose the best. See `alloctune sweep --help`.

    `options` (a SweepOptions) and `callbacks` (a SweepCallbacks), or their fields as keyword arguments, which
    win over both: `sweep("w.yaml", preset="h200", repeats=5, notice=print)`. A bad option, or a name that is
    neither, is an OptionError naming the field.

    `search`: instead of the grid, search up to that many settings of each torch's space by replay (backend sim
    or hybrid) and sweep the Pareto front. A hybrid sweep without `trace` records it during the default's first
    trial (for a workload, not a command, that trial counts as the default's repeat 0); it then measures the
    default's other repeats and the `finalists` best simulated settings."""
    options, callbacks = from_arguments(options, callbacks, fields)
    spec = workload if isinstance(workload, WorkloadSpec) else load_workload(workload, options.preset)
    plan = make_plan(spec, options, callbacks)
    with contextlib.ExitStack() as held:  # the folder's lock, for the whole sweep
        folder = open_folder(sweep_info(spec, options, plan), options, callbacks.notice, held)
        folder.write_info(replace(folder.info(), finished=False))   # until its end: a resumed one too
        _run(folder, spec, options, plan, callbacks)
        folder.write_info(replace(folder.info(), finished=True))
        callbacks.phase("choosing and writing the reports", None)
        settings, choices = analyze(folder, options.max_slowdown)
    return SweepOutcome(folder, settings, choices, folder.info().skipped, plan.backend)


def analyze(folder: ResultsFolder | str | os.PathLike,
            max_slowdown: float | None = None) -> tuple[list[SettingResult], list[Choice]]:
    """Decide again from the folder's recorded trials alone and write what it says (choice.json, summary.md,
    plot.png and, for a finished sweep, best.env); measures nothing; returns the settings and choices, as
    `sweep()`'s outcome holds them. `folder`: a results folder (as `sweep()` returns it) or its path.
    `max_slowdown`: instead of the sweep's own (sweep.json keeps what was asked; the override lives with the
    decision, in choice.json)."""
    folder = results_folder(folder)
    if max_slowdown is not None:
        check_max_slowdown(max_slowdown)
    with folder.together():  # not while a sweep writes the folder; its files change together or not at all
        info = folder.info()
        decision = decide(info, folder.trials(), max_slowdown, folder_calibration(folder))
        write_folder(folder, info, decision)
    return decision.settings, decision.choices


def _run(folder: ResultsFolder, spec: WorkloadSpec, options: SweepOptions, plan: Plan,
         callbacks: SweepCallbacks) -> None:
    """The plan's trials, each appended to the trials file as it finishes: the default's first trial recording
    the trace (hybrid without one), the replays (sim, hybrid), then the measured trials (cuda; hybrid: the
    finalists). The estimate of the GPU trials is told before the first and kept current after each."""
    traces, planned = plan.replayed[0] if plan.replayed else None, plan.planned
    tally = Tally(callbacks.estimate, len(options.gpus or (0,)), folder.trials())

    def progress(record: TrialRecord, done: int, total: int) -> None:
        tally.count(record)
        callbacks.progress(record, done, total)

    if plan.backend != Backend.SIM and not tally.done:
        tally.expect(first_estimate(plan.planned.values(), Asked(
            hybrid=plan.backend == Backend.HYBRID, recording=plan.recording, command=spec.command is not None,
            auto=options.auto, confirm=options.confirm, rounds=options.rounds, finalists=options.finalists,
            searched=options.search is not None, named=bool(_named(spec, options, plan)),
            max_slowdown=options.max_slowdown)))
    if plan.recording:
        task = recording_task(_measured(spec, options, AllocConf(), 0, plan.probes[0]), folder)
        traces = record_default(folder, task, lambda tasks: execute(folder, plan.runner, tasks, progress))
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


def _named(spec: WorkloadSpec, options: SweepOptions, plan: Plan) -> list[str]:
    """The settings the user named (--conf, --grid, the workload's grid:), as the grid holds them."""
    return [str(c) for c in plan.confs] if options.grid or spec.grid else []


def _replay(folder: ResultsFolder, spec: WorkloadSpec, options: SweepOptions, plan: Plan, traces: list[Trace],
            callbacks: SweepCallbacks) -> dict[str, list[AllocConf]]:
    """Replay the planned settings (with `search`: the Pareto front of a search of each torch's settings space)
    through the simulator; returns the settings replayed, per interpreter."""
    names = folder.info().trace_paths   # where each trace was read from, by rank
    # Each interpreter's torch decides which settings are valid (the probe) and whose allocator behaviour the
    # simulator follows where versions differ.
    sim = SimExecutor(traces, names, {sim_env_id(p.env_id): p.torch_version for p in plan.probes},
                      callbacks.notice)
    budget = budget_on(*options.budget_limit, sim.device_memory)   # a fraction is of the recording's card
    planned = plan.planned
    if options.search is not None:   # the front, and the settings named beside the search that it did not find
        found = search_plan(folder, plan.probes, traces, device_memory=sim.device_memory, budget_bytes=budget,
                            max_settings=options.search, trace_names=names, progress=callbacks.search_progress)
        planned = {env: found[env] + [c for c in planned[env] if c not in found[env]] for env in found}
    tasks = [TrialTask(spec.to_dict(), spec.digest(), conf, 0, p.python, sim_env_id(p.env_id), budget,
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
