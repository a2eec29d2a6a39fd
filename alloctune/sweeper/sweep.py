"""`sweep()`: workload -> grid -> planned trials -> executor -> records -> choice -> reports.

The Python API behind `alloctune sweep`. The sweeper plans `TrialTask`s and hands them to an executor
(`executors/`: local child processes, simulator replays, a Ray cluster); it alone appends what comes back to the
trials file; choosing and reporting read the records back, so an interrupted sweep resumes where it stopped and its
reports are always built from what was really recorded.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .. import __version__
from ..decide.choice import Choice, SettingResult, choose, summarize_settings
from ..decide.rounds import DEFAULT_MAX_REPEATS, MIN_ROUNDS, contenders, precision_note
from ..errors import AlloctuneError
from ..results.folder import LOCK_FILE, ResultsFolder, Skipped, SweepInfo
from ..results.records import DEFAULT_MAX_SLOWDOWN, Backend, TrialRecord, TrialState, sim_env_id
from ..settings.conf import AllocConf
from ..settings.grid import DEFAULT_GRID, apply_rules, expand, refuse_rejected
from ..trial.probe import ProbeResult, check_settings, probe
from ..trial.task import TrialTask
from ..units import parse_budget
from ..workload.command import CommandSpec, is_python, target_python
from ..workload.loader import load_workload
from ..workload.spec import DEFAULT_TIMEOUT_S, WorkloadSpec
from .executors import Executor, LocalExecutor, SimExecutor
from .hybrid import HYBRID_FINALISTS, TRACE_FILE, finalists, record_default, recording_task, search_plan


@dataclass
class SweepOutcome:
    folder: ResultsFolder
    settings: list[SettingResult]
    choices: list[Choice]
    skipped: list[Skipped]
    backend: str


# Called after every finished trial with (record, trials done, trials planned).
ProgressFn = Callable[[TrialRecord, int, int], None]
# Called as each phase starts, with its name and, where the phase counts trials, (done, total) known up front.
PhaseFn = Callable[[str, "tuple[int, int] | None"], None]


def sweep(workload: str | os.PathLike | WorkloadSpec, *, preset: str | None = None, grid: list | None = None,
          repeats: int | str = "auto", max_repeats: int = DEFAULT_MAX_REPEATS, time_budget_s: float | None = None,
          gpus: list[int] | None = None, budget: str | None = None,
          pythons: list[str] | None = None, backend: Backend | str = Backend.AUTO, results_root: str | os.PathLike = "results",
          out: str | os.PathLike | None = None, fresh: bool = False, max_slowdown: float = DEFAULT_MAX_SLOWDOWN,
          timeout_s: float | None = None, trace: str | None = None, command: str | None = None,
          executor: str = "local", ray_address: str | None = None, ray_accelerator: str | None = None,
          search: int | None = None, finalists_count: int = HYBRID_FINALISTS,
          gpus_per_trial: int = 1, progress: ProgressFn | None = None,
          search_progress: Callable[[str, int, int, str], None] | None = None,
          notice: Callable[[str], None] = lambda _: None,
          phase: PhaseFn = lambda name, count: None) -> SweepOutcome:
    """Sweep a grid of allocator settings over a workload and choose the best. See `alloctune sweep --help`.

    `search`: instead of the grid, search up to that many settings of each torch's space by replay (backend sim
    or hybrid) and sweep the Pareto front. A hybrid sweep without `trace` records it during the default's first
    trial (for a workload, not a command, that trial counts as the default's repeat 0); it then measures the
    default's other repeats and the `finalists_count` best simulated settings."""
    spec = workload if isinstance(workload, WorkloadSpec) else load_workload(workload, preset)
    auto = repeats == "auto"
    if not auto and (not isinstance(repeats, int) or repeats < 1):
        raise AlloctuneError(f"--repeats must be 'auto' or at least 1, got {repeats!r}")
    if auto and max_repeats < MIN_ROUNDS:
        raise AlloctuneError(f"--max-repeats must be at least {MIN_ROUNDS}, got {max_repeats}")
    if time_budget_s is not None and time_budget_s <= 0:
        raise AlloctuneError(f"--time-budget must be positive, got {time_budget_s:g}")
    rounds = max_repeats if auto else int(repeats)
    budget_bytes, budget_fraction = parse_budget(budget) if budget else (None, None)
    # A search replaces the grid: its candidates are judged by each torch as the search goes.
    confs = [AllocConf()] if search is not None else expand(grid or list(spec.grid or DEFAULT_GRID))
    if search is not None and backend == Backend.CUDA:
        raise AlloctuneError("--search replays a trace: use it with --backend sim or hybrid")
    if spec.command is not None:
        pythons, backend = _command_pythons(spec, pythons, backend)
    runner = _make_executor(executor, gpus, ray_address, ray_accelerator, backend, notice, gpus_per_trial)
    phase(f"probing {len(pythons or [sys.executable])} Python interpreter(s)", None)
    probes = _probe_all(pythons or [sys.executable], runner)
    if spec.command is not None and (blind := [p.python for p in probes if not p.device_count]):
        raise AlloctuneError(f"a command is measured on a GPU, and none is visible to {', '.join(blind)}")
    backend = _resolve_backend(backend, probes, notice)
    if search is not None and backend == Backend.CUDA:   # auto on a GPU: search, then measure the best
        backend = Backend.HYBRID
    recording = backend == Backend.HYBRID and not trace   # records its own trace in the default's first trial
    if recording and executor != "local":
        raise AlloctuneError("a hybrid sweep records its trace on this machine's GPU: with --executor ray, record "
                             "one first ('alloctune record') and pass it with --trace")
    gpus = gpus or [0]
    if backend != Backend.SIM and (bad := [g for g in gpus if not 0 <= g < min(p.device_count for p in probes)]):
        raise AlloctuneError(f"--gpus {','.join(map(str, bad))}: only {min(p.device_count for p in probes)} "
                             f"GPU(s) visible")

    named = bool(grid or spec.grid)   # settings the user chose, not the default grid
    planned, skipped = {}, []
    phase(f"parsing {len(confs)} settings with each interpreter's torch", None)
    for p in probes:  # each interpreter's torch parses the settings itself (also for replay: its version rules)
        valid, skips = apply_rules(confs, p.torch_version, has_budget=budget is not None,
                                   accepted=runner.call(check_settings, p.python, confs))
        if named:
            refuse_rejected(skips, p.torch_version)
            for s in skips:   # valid but pointless: still skipped, but the user asked for it, so say so now
                notice(f"you named {s.conf!r}, but it will not run: {s.reason}")
        planned[p.env_id] = valid
        skipped += [Skipped(s.conf, s.reason, sim_env_id(p.env_id) if backend == Backend.SIM else p.env_id)
                    for s in skips]

    if backend == Backend.SIM or (backend == Backend.HYBRID and trace):
        phase("loading the allocation trace", None)
    replayed = _load_replay_trace(spec, trace, notice) if backend == Backend.SIM or (backend == Backend.HYBRID and trace) \
        else None
    info = SweepInfo(
        workload_name=spec.name, workload_hash=spec.digest(), workload=spec.to_dict(),
        grid=[str(c) for c in confs], skipped=skipped, envs={p.env_id: p.to_json() for p in probes},
        repeats=rounds if backend != Backend.SIM else 1, auto_repeats=auto and backend != Backend.SIM,
        time_budget_s=time_budget_s if auto else None, budget_bytes=budget_bytes, budget_fraction=budget_fraction,
        backend=backend, max_slowdown=max_slowdown,
        trace=replayed[1] if replayed else ({"path": TRACE_FILE, "recorded_in": "the default's first trial"}
                                             if recording else None), search=search,
        finalists=finalists_count if backend == Backend.HYBRID else None,
        command=command or _command_line(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), alloctune_version=__version__)
    with contextlib.ExitStack() as held:  # the folder's lock, for the whole sweep
        folder = _open_folder(info, results_root, out, fresh, notice, held)

        def measured(conf: AllocConf, r: int, p: ProbeResult) -> TrialTask:
            return TrialTask(spec.to_dict(), spec.digest(), conf, r, p.python, p.env_id, budget_bytes,
                             budget_fraction, timeout_s or spec.timeout_s or DEFAULT_TIMEOUT_S)

        if recording:
            replayed = (record_default(folder, recording_task(measured(AllocConf(), 0, probes[0]), folder),
                                       lambda tasks: _execute(folder, runner, tasks, progress)),
                        {"path": TRACE_FILE})
        if replayed:
            # Each interpreter's torch decides which settings are valid (the probe) and whose allocator behaviour
            # the simulator follows where versions differ.
            sim = SimExecutor(replayed[0], replayed[1]["path"],
                              {sim_env_id(p.env_id): p.torch_version for p in probes}, notice)
            if search is not None:
                planned = search_plan(folder, probes, replayed[0], device_memory=sim.device_memory,
                                      budget_bytes=sim.budget_bytes(budget_bytes, budget_fraction),
                                      max_settings=search, trace_name=replayed[1]["path"], progress=search_progress)
            tasks = [TrialTask(spec.to_dict(), spec.digest(), conf, 0, p.python, sim_env_id(p.env_id),
                               sim.budget_bytes(budget_bytes, budget_fraction), backend=Backend.SIM)
                     for p in probes for conf in planned[p.env_id]]
            _execute(folder, sim, tasks, progress, phase=phase, what="replaying settings")
        if backend in (Backend.CUDA, Backend.HYBRID):
            if backend == Backend.HYBRID:
                planned = finalists(folder.trials(), planned, max_slowdown, finalists_count)
            probe_of = {p.env_id: p for p in probes}

            def task(env_id: str, conf: AllocConf, r: int) -> TrialTask:
                return measured(conf, r, probe_of[env_id])

            with runner:
                if auto:
                    phase("running trials in rounds", None)
                    _run_rounds(folder, runner, planned, task, rounds, time_budget_s, max_slowdown, len(gpus),
                                progress, notice)
                else:
                    tasks = [task(p.env_id, conf, r)  # interleaved: A B C A B C
                             for r in range(rounds) for p in probes for conf in planned[p.env_id]]
                    _execute(folder, runner, tasks, progress, phase=phase,
                             what="running trials")

        phase("choosing and writing the reports", None)
        settings, choices = analyze(folder, max_slowdown)
    return SweepOutcome(folder, settings, choices, folder.info().skipped, backend)


def analyze(folder: ResultsFolder, max_slowdown: float | None = None) -> tuple[list[SettingResult], list[Choice]]:
    """Decide from the recorded trials alone and write choice.json, summary.md, plot.png and (for a finished
    sweep) best.env.

    A sweep ends with this; `alloctune report` calls it again, e.g. with another --max-slowdown, without
    measuring anything."""
    with folder.lock():  # not while a sweep writes the folder
        return _analyze(folder, max_slowdown)


def _analyze(folder: ResultsFolder, max_slowdown: float | None) -> tuple[list[SettingResult], list[Choice]]:
    from ..decide.planned import planned_trials, recorded_trials
    from ..files import write_file
    from ..report.export import provenance, render
    from ..report.plot import plot_pareto
    from ..report.summary import write_summary

    info = folder.info()   # what was asked stays as asked: an override lives with the decision (choice.json)
    max_slowdown = info.max_slowdown if max_slowdown is None else max_slowdown
    trials = folder.trials()
    settings = summarize_settings(trials, max_slowdown)
    choices = [_with_precision(replace(c, trials_recorded=recorded_trials(trials, c.env_id, c.backend),
                                       trials_planned=planned_trials(info, c.env_id, c.backend)), info)
               for c in choose(settings, max_slowdown)]
    records = [c.record() for c in choices]
    folder.write_choice(records)
    write_summary(folder, info, settings, choices)
    plot_pareto(settings, choices, folder.path / "plot.png")
    best = next((c for c in records if c.conf is not None), None)
    # best.env is read as is (--env-file): none when nothing fits (summary.md says so), nor from an interrupted
    # sweep, as `export` refuses one without --allow-incomplete; a stale one would contradict choice.json.
    if best is not None and best.complete:
        write_file(folder.path / "best.env", render(best, "env", provenance(folder, info, best)))
    else:
        (folder.path / "best.env").unlink(missing_ok=True)
    return settings, choices


def _with_precision(choice: Choice, info: SweepInfo) -> Choice:
    """The choice with its sentence on how precise the throughput comparison got (measured groups only)."""
    if choice.simulated or not choice.compared:
        return choice
    best = choice.best
    shown = [best] if best is not None and not best.is_default and best.vs_default is not None else choice.compared
    rounds = max((s.vs_default.pairs or len(s.trials) for s in shown if s.vs_default is not None), default=0)
    return replace(choice, precision=precision_note(choice.detectable, rounds, choice.max_slowdown,
                                                    auto=info.auto_repeats, max_repeats=info.repeats))


def gpu_slots(gpus: list[int], per_trial: int) -> list:
    """What each concurrently running trial gets: one GPU index, or with per_trial > 1 a disjoint tuple."""
    if per_trial < 1 or len(gpus) % per_trial:
        raise AlloctuneError(f"--gpus-per-trial {per_trial}: expected a positive divisor of the number of --gpus "
                             f"({len(gpus)})")
    if per_trial == 1:
        return list(gpus)
    return [tuple(gpus[i:i + per_trial]) for i in range(0, len(gpus), per_trial)]


def _command_line() -> str:
    """How this sweep was started, as the user would type it again."""
    program = Path(sys.argv[0]).name
    program = "alloctune" if program in ("__main__.py", "alloctune") else program
    return shlex.join([program, *sys.argv[1:]])


def _make_executor(name: str, gpus, ray_address, ray_accelerator, backend: str, notice,
                   gpus_per_trial: int = 1) -> Executor:
    """Where measured trials run (and interpreters are probed): this machine, or a Ray cluster."""
    if name == "local":
        if ray_address or ray_accelerator:
            raise AlloctuneError("--ray-address and --ray-accelerator go with --executor ray")
        return LocalExecutor(gpu_slots(gpus or [0], gpus_per_trial))
    if name != "ray":
        raise AlloctuneError(f"--executor expects local or ray, got {name!r}")
    if backend == Backend.SIM:
        raise AlloctuneError("--executor ray runs measured trials; --backend sim replays here, without a cluster")
    if gpus:
        raise AlloctuneError("--gpus picks GPUs of this machine; with --executor ray, Ray assigns each trial its GPUs")
    from .executors.ray import RayExecutor

    if gpus_per_trial < 1:
        raise AlloctuneError(f"--gpus-per-trial {gpus_per_trial}: expected at least 1")
    return RayExecutor(ray_address, gpus_per_trial=gpus_per_trial, accelerator=ray_accelerator, notice=notice)


def _probe_all(pythons: list[str], runner: Executor) -> list[ProbeResult]:
    """Probe each interpreter; make environment ids unique when two run the same torch."""
    probes, seen = [], set()
    for python in pythons:
        p = runner.call(probe, python)
        if p.env_id in seen:
            p = replace(p, env_id=f"{p.env_id}@{p.python}")
        seen.add(p.env_id)
        probes.append(p)
    return probes


def _resolve_backend(backend: Backend | str, probes: list[ProbeResult], notice) -> Backend:
    has_gpu = all(p.cuda_available and p.device_count > 0 for p in probes)
    if backend == Backend.AUTO:
        if has_gpu:
            return Backend.CUDA
        notice("No CUDA GPU is visible: judging the grid by replaying a recorded allocation trace through the "
               "simulator. Results are simulated (peak memory only, no throughput); confirm on a GPU with "
               "--backend cuda.")
        return Backend.SIM
    if backend not in (Backend.CUDA, Backend.SIM, Backend.HYBRID):
        raise AlloctuneError(f"--backend expects auto, cuda, sim or hybrid, got {backend!r}")
    if backend in (Backend.CUDA, Backend.HYBRID) and not has_gpu:
        missing = [p.python for p in probes if not (p.cuda_available and p.device_count)]
        raise AlloctuneError(f"--backend {backend} needs a CUDA GPU, but none is visible to {', '.join(missing)}; "
                             f"use --backend sim")
    return Backend(backend)


def _identity(info: SweepInfo) -> tuple:
    """What makes two sweeps the same sweep (so the second resumes the first)."""
    return (info.workload_hash, info.grid, info.repeats, info.auto_repeats, info.budget_bytes, info.budget_fraction,
            info.backend, sorted(info.envs), (info.trace or {}).get("sha256"), info.search, info.finalists)


def _open_folder(info: SweepInfo, results_root, out, fresh: bool, notice,
                 held: contextlib.ExitStack) -> ResultsFolder:
    """`out` if given (resumed when it holds the same sweep); else the newest results/<workload>-* folder of
    the same sweep (resume), unless `fresh`; else a new timestamped folder. Locked (in `held`) before it is read
    or written: a folder another sweep is writing is refused. An `out` that holds files but no sweep is the user's
    own folder: refused before anything is written there."""
    if out is not None:
        folder = ResultsFolder(out)
        if not (folder.path / "sweep.json").exists() and (theirs := _not_ours(folder.path)):
            listed = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
            raise AlloctuneError(f"--out {folder.path} holds {listed} and no sweep (no sweep.json): a sweep writes "
                                 f"into a results folder of its own, so give a new or empty folder")
        held.enter_context(folder.lock())
        if (folder.path / "sweep.json").exists():
            if _identity(folder.info()) != _identity(info):
                raise AlloctuneError(f"{folder.path} holds a different sweep (workload, grid, repeats, budget, "
                                     f"backend or interpreters differ); choose another --out")
            notice(f"Resuming the sweep in {folder.path}")
            return folder
        folder.write_info(info)
        return folder
    root = Path(results_root)
    if not fresh and root.is_dir():
        for path in sorted(root.glob(f"{_label(info)}-*"), reverse=True):
            try:
                same = _identity(ResultsFolder(path).info()) == _identity(info)
            except AlloctuneError:
                continue
            if same:
                folder = ResultsFolder(path)
                held.enter_context(folder.lock())
                notice(f"Resuming the sweep in {path} (use --fresh to start a new one)")
                return folder
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    folder = ResultsFolder(root / f"{_label(info)}-{stamp}")
    if folder.path.resolve().parent != root.resolve():  # a name is never a path (workload.py checks; so do we)
        raise AlloctuneError(f"workload and preset names must not contain path separators: {_label(info)!r}")
    held.enter_context(folder.lock())
    if (folder.path / "sweep.json").exists():  # another sweep of this second finished already
        raise AlloctuneError(f"{folder.path} was created by another sweep a moment ago; run again")
    folder.write_info(info)
    return folder


def _not_ours(path: Path) -> list[str]:
    """What a folder holds besides a lock file alloctune left (sorted names), when it is a folder."""
    return sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE) if path.is_dir() else []


def _label(info: SweepInfo) -> str:
    """Folder name stem: the workload and its preset (two presets of one workload are different sweeps)."""
    preset = info.workload.get("preset")
    return f"{info.workload_name}-{preset}" if preset else info.workload_name


def _execute(folder: ResultsFolder, executor: Executor, tasks: list[TrialTask], progress,
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


def _run_rounds(folder: ResultsFolder, executor: Executor, planned: dict, task, max_rounds: int,
                time_budget_s: float | None, max_slowdown: float, slots: int, progress, notice) -> None:
    """`--repeats auto`: round after round, the default and then the settings still in contention (rounds.py),
    until none is, or `max_rounds` or the time budget are spent. A round's default run also closes the previous
    round's bracket, so who is still in contention is decided after it, from bracketed pairs only; after the last
    round one more default run closes it. Each round is planned from everything recorded so far, so a resumed
    sweep takes the same path (and in a hybrid sweep the trial that recorded the trace, having the key of the
    default's repeat 0, is the first round's default). `slots`: trials the executor runs at once (for the time
    estimate)."""
    started, done, envs = time.monotonic(), 0, sorted(planned)
    default = AllocConf.parse("")
    for r in range(max_rounds + 1):
        done += _execute(folder, executor, [task(env_id, default, r) for env_id in envs], progress, done)
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
        done += _execute(folder, executor, tasks, progress, done, len(tasks) * (max_rounds - r - 1) + 1)


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


def _load_replay_trace(spec: WorkloadSpec, trace_path, notice):
    """The trace to replay (--trace, else the workload's), checked before any results folder exists; with its
    identity for sweep.json, so that a sweep of another trace never resumes this one."""
    from ..sim.trace import load_trace

    path = trace_path or spec.trace
    if not path:
        raise AlloctuneError(_no_trace_hint(spec))
    trace = load_trace(path)
    recorded_from = trace.meta.get("workload")
    if recorded_from is None:   # a plain torch snapshot: nothing says whose it is, so trust the user, aloud
        notice(f"the trace {path} carries no alloctune metadata (a snapshot recorded outside alloctune): "
               f"replaying it as {spec.name}'s")
    elif recorded_from != spec.name:
        raise AlloctuneError(f"the trace {path} was recorded from workload {recorded_from!r}, not {spec.name!r}: "
                             f"its numbers would be stored as {spec.name}'s; pass a trace of {spec.name}")
    elif trace.meta.get("workload_hash") and trace.meta["workload_hash"] != spec.digest():
        notice(f"the trace {path} was recorded from a different definition of {spec.name} (other parameters or "
               f"preset); replaying it anyway")
    for warning in trace.warnings:
        notice(f"trace: {warning}")
    sha256 = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return trace, {"path": str(path), "sha256": sha256}


def _no_trace_hint(spec: WorkloadSpec) -> str:
    """What to do when there is no trace to replay: sweep a preset that ships one, else record one."""
    from ..workload.loader import presets_with_trace

    where = os.path.relpath(spec.source) if spec.source else spec.name
    preset = f" --preset {spec.preset}" if spec.preset else ""
    what = f"workload {spec.name!r}" + (f" (preset {spec.preset!r})" if spec.preset else "")
    shipped = presets_with_trace(spec.source) if spec.source else []
    if shipped:
        return (f"{what} has no recorded allocation trace to replay; preset {shipped[0]!r} ships one: "
                f"alloctune sweep {shlex.quote(where)} --preset {shipped[0]} (or record this one on a GPU machine: "
                f"alloctune record {shlex.quote(where)}{preset} -o trace.xz, then pass --trace trace.xz)")
    return (f"{what} has no recorded allocation trace to replay: record one on a GPU machine with "
            f"'alloctune record {shlex.quote(where)}{preset} -o trace.xz', then pass it with --trace trace.xz")


def _command_pythons(spec: WorkloadSpec, pythons: list[str] | None, backend: Backend | str) -> tuple[list[str], Backend]:
    """The interpreters to probe (and, for a command that starts with Python, to run it with) and the backend:
    a command is measured on the GPU (cuda), or planned by replay and its finalists measured (hybrid)."""
    assert spec.command is not None
    command = CommandSpec.from_dict(spec.command)
    if backend not in (Backend.AUTO, Backend.CUDA, Backend.HYBRID):
        raise AlloctuneError(f"--backend {backend}: a command is measured on the GPU (--backend cuda or hybrid); to "
                             f"judge it by replay alone, record it first (alloctune record -o t.pickle -- ...) and "
                             f"replay that")
    if pythons and not is_python(command.argv[0]):
        raise AlloctuneError(f"--python applies to a command that starts with a Python interpreter, and "
                             f"{os.path.basename(command.argv[0])} is not one")
    return list(pythons or [target_python(command)]), Backend.HYBRID if backend == Backend.HYBRID else Backend.CUDA
