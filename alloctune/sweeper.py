"""`sweep()`: workload -> grid -> trials (measured or replayed) -> records -> choice -> reports.

The Python API behind `alloctune sweep`. Measuring (`runner.py` children, or `sim/` replays) only appends
records to the trials file; choosing and reporting read them back, so an interrupted sweep resumes where it stopped
and its reports are always built from what was really recorded.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from . import __version__
from .conf import AllocConf
from .errors import AlloctuneError
from .grid import DEFAULT_GRID, apply_rules, expand
from .probe import ProbeResult, check_settings, probe
from .records import TrialRecord, TrialState
from .results import ResultsFolder, Skipped, SweepInfo
from .runner import DEFAULT_TIMEOUT_S, TrialTask, run_trials
from .select import Choice, SettingResult, choose, summarize_settings
from .units import parse_budget
from .versions import simulation_note
from .workload import WorkloadSpec, load_workload

DEFAULT_CARD_BYTES = 143771 * 2**20  # an H200 as nvidia-smi reports it: the simulator's card when none is known
HYBRID_FINALISTS = 3


@dataclass
class SweepOutcome:
    folder: ResultsFolder
    settings: list[SettingResult]
    choices: list[Choice]
    skipped: list[Skipped]
    backend: str


# Called after every finished trial with (record, trials done, trials planned).
ProgressFn = Callable[[TrialRecord, int, int], None]


def sweep(workload: str | os.PathLike | WorkloadSpec, *, preset: str | None = None, grid: list | None = None,
          repeats: int = 3, gpus: list[int] | None = None, budget: str | None = None,
          pythons: list[str] | None = None, backend: str = "auto", results_root: str | os.PathLike = "results",
          out: str | os.PathLike | None = None, fresh: bool = False, max_slowdown: float = 0.02,
          timeout_s: float | None = None, trace: str | None = None, command: str | None = None,
          progress: ProgressFn | None = None, notice: Callable[[str], None] = lambda _: None) -> SweepOutcome:
    """Sweep a grid of allocator settings over a workload and choose the best. See `alloctune sweep --help`."""
    spec = workload if isinstance(workload, WorkloadSpec) else load_workload(workload, preset)
    if repeats < 1:
        raise AlloctuneError(f"--repeats must be at least 1, got {repeats}")
    budget_bytes, budget_fraction = parse_budget(budget) if budget else (None, None)
    confs = expand(grid or list(spec.grid or DEFAULT_GRID))
    probes = _probe_all(pythons or [sys.executable])
    backend = _resolve_backend(backend, probes, notice)
    gpus = gpus or [0]
    if backend != "sim" and (bad := [g for g in gpus if not 0 <= g < min(p.device_count for p in probes)]):
        raise AlloctuneError(f"--gpus {','.join(map(str, bad))}: only {min(p.device_count for p in probes)} "
                             f"GPU(s) visible")

    planned, skipped = {}, []
    for p in probes:  # each interpreter's torch parses the settings itself (also for replay: its version rules)
        valid, skips = apply_rules(confs, p.torch_version, has_budget=budget is not None,
                                   accepted=check_settings(p.python, confs))
        planned[p.env_id] = valid
        skipped += [Skipped(s.conf, s.reason, sim_env_id(p.env_id) if backend == "sim" else p.env_id)
                    for s in skips]

    replayed = _load_replay_trace(spec, trace, notice) if backend in ("sim", "hybrid") else None
    info = SweepInfo(
        workload_name=spec.name, workload_hash=spec.digest(), workload=spec.to_dict(),
        grid=[str(c) for c in confs], skipped=skipped, envs={p.env_id: p.to_json() for p in probes},
        repeats=repeats if backend != "sim" else 1, budget_bytes=budget_bytes, budget_fraction=budget_fraction,
        backend=backend, max_slowdown=max_slowdown, trace=replayed and replayed[1],
        command=command or _command_line(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), alloctune_version=__version__)
    with contextlib.ExitStack() as held:  # the folder's lock, for the whole sweep
        folder = _open_folder(info, results_root, out, fresh, notice, held)
        if replayed:
            _replay_grid(folder, spec, planned, probes, budget_bytes, budget_fraction, replayed[0], progress,
                         notice)
        if backend in ("cuda", "hybrid"):
            if backend == "hybrid":
                planned = _finalists(folder.trials(), planned, max_slowdown)
            limit = timeout_s or spec.timeout_s or DEFAULT_TIMEOUT_S
            tasks = [TrialTask(spec.to_dict(), spec.digest(), conf, r, p.python, p.env_id, budget_bytes,
                               budget_fraction, limit)
                     for r in range(repeats) for p in probes for conf in planned[p.env_id]]  # interleaved: A B C A B C
            _run_measured(folder, tasks, gpus, progress)

        settings, choices = analyze(folder, max_slowdown)
    return SweepOutcome(folder, settings, choices, folder.info().skipped, backend)


def analyze(folder: ResultsFolder, max_slowdown: float | None = None) -> tuple[list[SettingResult], list[Choice]]:
    """Decide from the recorded trials alone and write choice.json, summary.md, plot.png and best.env.

    A sweep ends with this; `alloctune report` calls it again, e.g. with another --max-slowdown, without
    measuring anything."""
    with folder.lock():  # not while a sweep writes the folder
        return _analyze(folder, max_slowdown)


def _analyze(folder: ResultsFolder, max_slowdown: float | None) -> tuple[list[SettingResult], list[Choice]]:
    from .export import provenance, render
    from .plot import plot_pareto
    from .report import write_summary

    info = folder.info()
    if max_slowdown is not None and max_slowdown != info.max_slowdown:
        info.max_slowdown = max_slowdown
        folder.write_info(info)
    settings = summarize_settings(folder.trials(), info.max_slowdown)
    choices = choose(settings, info.max_slowdown)
    records = [c.record() for c in choices]
    folder.write_choice(records)
    write_summary(folder, info, settings, choices)
    plot_pareto(settings, choices, folder.path / "plot.png")
    best = next((c for c in records if c.conf is not None), None)
    if best is not None:  # when nothing fits there is nothing to hand over; summary.md says so
        (folder.path / "best.env").write_text(render(best, "env", provenance(folder, info, best)), encoding="utf-8")
    return settings, choices


def sim_env_id(env_id: str) -> str:
    """Replayed results are kept apart from measured ones of the same interpreter."""
    return f"sim:{env_id}"


def _command_line() -> str:
    """How this sweep was started, as the user would type it again."""
    program = Path(sys.argv[0]).name
    program = "alloctune" if program in ("__main__.py", "alloctune") else program
    return shlex.join([program, *sys.argv[1:]])


def _probe_all(pythons: list[str]) -> list[ProbeResult]:
    """Probe each interpreter; make environment ids unique when two run the same torch."""
    probes, seen = [], set()
    for python in pythons:
        p = probe(python)
        if p.env_id in seen:
            p = replace(p, env_id=f"{p.env_id}@{p.python}")
        seen.add(p.env_id)
        probes.append(p)
    return probes


def _resolve_backend(backend: str, probes: list[ProbeResult], notice) -> str:
    has_gpu = all(p.cuda_available and p.device_count > 0 for p in probes)
    if backend == "auto":
        if has_gpu:
            return "cuda"
        notice("No CUDA GPU is visible: judging the grid by replaying a recorded allocation trace through the "
               "simulator. Results are simulated (peak memory only, no throughput); confirm on a GPU with "
               "--backend cuda.")
        return "sim"
    if backend not in ("cuda", "sim", "hybrid"):
        raise AlloctuneError(f"--backend expects auto, cuda, sim or hybrid, got {backend!r}")
    if backend in ("cuda", "hybrid") and not has_gpu:
        missing = [p.python for p in probes if not (p.cuda_available and p.device_count)]
        raise AlloctuneError(f"--backend {backend} needs a CUDA GPU, but none is visible to {', '.join(missing)}; "
                             f"use --backend sim")
    return backend


def _identity(info: SweepInfo) -> tuple:
    """What makes two sweeps the same sweep (so the second resumes the first)."""
    return (info.workload_hash, info.grid, info.repeats, info.budget_bytes, info.budget_fraction, info.backend,
            sorted(info.envs), (info.trace or {}).get("sha256"))


def _open_folder(info: SweepInfo, results_root, out, fresh: bool, notice,
                 held: contextlib.ExitStack) -> ResultsFolder:
    """`out` if given (resumed when it holds the same sweep); else the newest results/<workload>-* folder of
    the same sweep (resume), unless `fresh`; else a new timestamped folder. Locked (in `held`) before it is read
    or written: a folder another sweep is writing is refused."""
    if out is not None:
        folder = ResultsFolder(out)
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
    held.enter_context(folder.lock())
    if (folder.path / "sweep.json").exists():  # another sweep of this second finished already
        raise AlloctuneError(f"{folder.path} was created by another sweep a moment ago; run again")
    folder.write_info(info)
    return folder


def _label(info: SweepInfo) -> str:
    """Folder name stem: the workload and its preset (two presets of one workload are different sweeps)."""
    preset = info.workload.get("preset")
    return f"{info.workload_name}-{preset}" if preset else info.workload_name


def _run_measured(folder: ResultsFolder, tasks: list[TrialTask], gpus, progress) -> None:
    finished = folder.store.finished_keys()
    todo = [t for t in tasks if t.key() not in finished]
    done = len(tasks) - len(todo)

    def on_done(task: TrialTask, record: TrialRecord) -> None:
        nonlocal done
        folder.store.append(record)
        done += 1
        if progress:
            progress(record, done, len(tasks))

    run_trials(todo, gpus, on_done)


def _load_replay_trace(spec: WorkloadSpec, trace_path, notice):
    """The trace to replay (--trace, else the workload's), checked before any results folder exists; with its
    identity for sweep.json, so that a sweep of another trace never resumes this one."""
    from .sim.trace import load_trace

    path = trace_path or spec.trace
    if not path:
        raise AlloctuneError(
            f"workload {spec.name!r} has no recorded allocation trace to replay: record one on a GPU machine with "
            f"'alloctune record {spec.source or spec.name} -o trace.xz', then pass it with --trace")
    trace = load_trace(path)
    if trace.meta.get("workload_hash") and trace.meta["workload_hash"] != spec.digest():
        notice(f"the trace {path} was recorded from a different definition of {spec.name} (other parameters or "
               f"preset); replaying it anyway")
    for warning in trace.warnings:
        notice(f"trace: {warning}")
    sha256 = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return trace, {"path": str(path), "sha256": sha256}


def _replay_grid(folder: ResultsFolder, spec: WorkloadSpec, planned, probes, budget_bytes, budget_fraction,
                 trace, progress, notice) -> None:
    """Judge every planned setting by replaying the trace, once per interpreter: its torch decides which settings
    are valid (the probe) and whose allocator behaviour the simulator follows where versions differ. Settings the
    simulator cannot model (cudaMallocAsync, keys that torch lacks) join the sweep's skipped list with the reason.
    A resumed sweep replays only what the trials file lacks."""
    from .sim.replay import replay

    meta = trace.meta
    device_memory = int(meta.get("device_total_bytes") or DEFAULT_CARD_BYTES)
    if budget_fraction is not None:
        budget_bytes = int(budget_fraction * device_memory)
    finished = folder.store.finished_keys()
    info = folder.info()
    todo = [(p, [c for c in planned[p.env_id]
                 if (spec.digest(), str(c), sim_env_id(p.env_id), "sim", budget_bytes, 0) not in finished])
            for p in probes]
    done, total = 0, sum(1 for _, confs in todo for c in confs if not c.is_async)
    for p, confs in todo:
        if note := simulation_note(p.torch_version):
            notice(note)
        env_id = sim_env_id(p.env_id)
        env = dict(meta.get("env") or {}, trace=info.trace["path"], trace_torch=meta.get("torch_version"),
                   simulated_as=p.torch_version)
        for outcome in replay(trace, confs, device_memory, budget_bytes=budget_bytes, torch_version=p.torch_version):
            if not outcome.simulated:
                skip = Skipped(str(AllocConf.parse(outcome.conf)), f"cannot be simulated: {outcome.reason}", env_id)
                if skip not in info.skipped:
                    info.skipped.append(skip)
                    notice(f"{outcome.conf}: not simulated: {outcome.reason}")
                continue
            done += 1
            m = outcome.measurement()
            record = TrialRecord(
                workload=spec.name, workload_hash=spec.digest(), conf=str(AllocConf.parse(outcome.conf)),
                repeat=0, env_id=env_id, backend="sim", state=TrialState.OOM if m.num_ooms else TrialState.OK,
                measurement=m, budget_bytes=budget_bytes, env=env,
                started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                error=f"simulated OOM at trace event {outcome.result.first_oom_index}" if m.num_ooms else None)
            folder.store.append(record)
            if progress:
                progress(record, done, max(total, done))
    folder.write_info(info)


def _finalists(records: list[TrialRecord], planned: dict, max_slowdown: float) -> dict:
    """Hybrid mode: the default plus the best few simulated settings go to the GPU."""
    sim_settings = [s for s in summarize_settings([r for r in records if r.backend == "sim"], max_slowdown)
                    if s.state == "fits"]
    ranked = [s.conf for s in sorted(sim_settings, key=lambda s: s.peak_reserved_bytes or 0)]
    keep = {""} | set(ranked[:HYBRID_FINALISTS])
    out = {env_id: [c for c in confs if str(c) in keep or c.is_async] for env_id, confs in planned.items()}
    return out
