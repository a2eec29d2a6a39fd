"""What a sweep will run, settled before any results folder exists: where trials run, the interpreters probed, the
backend resolved, the settings each torch accepts and the trace to replay; and the `SweepInfo` that identifies the
sweep in its folder."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable

from .. import __version__
from ..errors import AlloctuneError, OptionError, OptionText, TraceError
from ..files import sha256_of
from ..results.folder import Skipped, SweepInfo
from ..results.names import TRACE_FILE
from ..results.records import Backend, sim_env_id, torch_env_id
from ..settings.conf import AllocConf
from ..settings.grid import DEFAULT_GRID, apply_rules, expand, refuse_rejected
from ..settings.validation import SettingsCheck
from ..sim.limits import MAX_SNAPSHOT_BYTES
from ..sim.target import Target
from ..sim.trace import SeveralDevices, Trace, load_trace
from ..trial.probe import ProbeResult, check_settings_detail, probe_and_judge
from ..trial.recording import DRY_RUN_INSTEAD, dry_run_card
from ..units import plural
from ..workload.spec import WorkloadSpec
from .executors import Executor, LocalExecutor
from .options import ExecutorKind, SweepCallbacks, SweepOptions


@dataclass
class Plan:
    runner: Executor                     # where measured trials run and interpreters are probed
    probes: list[ProbeResult]
    backend: Backend                     # resolved: CUDA, SIM or HYBRID
    confs: list[AllocConf]               # the grid (for a search: the default and the settings named with grid)
    planned: dict[str, list[AllocConf]]  # env_id -> the settings its torch accepts
    skipped: list[Skipped]
    replayed: tuple[list[Trace], dict] | None  # the traces (one: --trace) and their identity (a recording sweep: None)
    recording: bool                      # hybrid without a trace: recorded during the default's first trial
    # The probed interpreters run the job (on the GPU, a command's own, or named with --python): replays follow
    # their torch; else the trace's, as in every command (sim/target.py)
    told: bool
    dry_run: str | None = None           # sweep --dry-run: the card the command's dry run stands for (replayed)

    kept: dict[str, str] = field(default_factory=dict)   # interpreter -> the id a resumed folder's replays keep

    @property
    def traces(self) -> list[Trace] | None:
        """The traces read before the sweep runs (`replayed`); None where it records or dry-runs its own."""
        return self.replayed[0] if self.replayed else None

    def target(self, p: ProbeResult, traces: list[Trace] | None) -> Target:
        """The torch `p`'s replays of `traces` follow (`told`: its own, else the trace's). A dry run stands for the
        torch that traced it on the card, so it follows that torch's release: its local build tag ('+cpu') names a
        build that ran on no card. Before a dry run has traced (`traces` None), what it will follow."""
        told = (p.torch_version.split("+")[0] if self.dry_run else p.torch_version) if self.told else None
        return Target(traces[0].meta.get("torch_version") if traces else None, told, "pythons")

    def replay_env_id(self, p: ProbeResult) -> str:
        """The environment id of `p`'s replays, which names the torch they simulate (`target`): `p`'s own id with
        that torch's version in place of its own, so the same where they follow its torch, the trace's in a sweep
        that only replays (one interpreter, its trace read here: `replayed`), the release in a dry run; `p`'s mark
        where two interpreters share a torch (`_probe_all`) keeps them apart. A resumed folder's replays keep the
        id they have (`kept`)."""
        if p.env_id in self.kept:
            return self.kept[p.env_id]
        assert self.told or self.replayed is not None
        followed = self.target(p, self.traces).followed
        if followed == p.torch_version:   # its own torch: its own id, whatever form the probe gave it
            return sim_env_id(p.env_id)
        own = torch_env_id(p.torch_version)
        return sim_env_id(torch_env_id(followed) + (p.env_id[len(own):] if p.env_id.startswith(own) else ""))


def make_plan(spec: WorkloadSpec, options: SweepOptions, callbacks: SweepCallbacks, typed: str | None) -> Plan:
    """`typed`: the workload file's path as the user gave it, for the commands a hint suggests (None: none given)."""
    # A search replaces the grid, its candidates judged by each torch as the search goes; settings the user named
    # join what it finds.
    confs = expand(list(options.grid or ([] if options.search is not None else spec.grid or DEFAULT_GRID)))
    pythons, backend = options.targets(spec)
    dry_run = dry_run_card(options.arch) if options.dry_run else None   # an unknown card: refused here
    given = None
    if options.trace and backend != Backend.CUDA:   # read first: a bad one is refused before any interpreter starts
        callbacks.phase("loading the allocation trace", None)
        given = _load_replay_trace(spec, options.trace, callbacks.notice, typed)
    runner = make_executor(options, callbacks.notice)
    callbacks.phase(f"probing {plural(len(pythons), 'Python interpreter')}", None)
    probes, checks = _probe_all(pythons, runner, confs)
    if spec.command is not None and not dry_run and (blind := [p.python for p in probes if not p.device_count]):
        raise AlloctuneError(OptionText("a command is measured on a GPU, and none is visible to {blind}; without "
                                        "one, " + DRY_RUN_INSTEAD, blind=", ".join(blind)))
    backend = _resolve_backend(backend, probes, callbacks.notice)
    if options.search is not None and backend == Backend.CUDA:   # auto on a GPU: search, then measure the best
        backend = Backend.HYBRID
    recording = backend == Backend.HYBRID and not options.trace   # records its own trace in the default's first trial
    _check_machines(options, backend, probes, recording)
    replayed = given if backend != Backend.CUDA else None   # a measured-only sweep replays nothing
    if backend == Backend.SIM and given is None and dry_run is None:   # the workload's own trace
        callbacks.phase("loading the allocation trace", None)
        replayed = _load_replay_trace(spec, options.trace, callbacks.notice, typed)
    told = backend != Backend.SIM or bool(options.pythons) or spec.command is not None
    plan = Plan(runner, probes, backend, confs, {}, [], replayed, recording, told, dry_run)
    callbacks.phase(f"checking {len(confs)} settings as the torch they run or replay under", None)
    plan.planned, plan.skipped = _settings(plan, checks, options, spec, callbacks.notice)
    return plan


def sweep_info(spec: WorkloadSpec, options: SweepOptions, plan: Plan) -> SweepInfo:
    """What the sweep asked for, as sweep.json keeps it (resume.py: the same sweep asked again resumes)."""
    budget_bytes, budget_fraction = options.budget_limit
    measured = plan.backend != Backend.SIM
    trace = plan.replayed[1] if plan.replayed else (
        {"path": TRACE_FILE, "recorded_in": "the default's first trial"} if plan.recording else
        {"path": TRACE_FILE, "recorded_in": "a dry run", "dry_run": plan.dry_run} if plan.dry_run else None)
    return SweepInfo(
        workload_name=spec.name, workload_hash=spec.digest(), workload=spec.to_dict(),
        grid=[str(c) for c in plan.confs], skipped=plan.skipped, envs={p.env_id: p.to_json() for p in plan.probes},
        repeats=options.rounds if measured else 1, auto_repeats=options.auto and measured,
        confirm=options.confirm and plan.backend == Backend.HYBRID,
        time_budget_s=options.time_budget_s if options.auto else None, budget_bytes=budget_bytes,
        budget_fraction=budget_fraction, backend=plan.backend, max_slowdown=options.max_slowdown,
        check_growth=options.check_growth, trace=trace,
        search=options.search, finalists=options.finalists if plan.backend == Backend.HYBRID else None,
        command=options.started_as or "",   # api/sweep.py: the CLI's argv (`command_line`), else the Python call
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), alloctune_version=__version__)


def make_executor(options: SweepOptions, notice: Callable[[str], None]) -> Executor:
    """Where measured trials run (and interpreters are probed): this machine, or a Ray cluster."""
    if options.executor == ExecutorKind.LOCAL:
        return LocalExecutor(gpu_slots(list(options.gpus or [0]), options.gpus_per_trial))
    from .executors.ray import RayExecutor

    return RayExecutor(options.ray_address, gpus_per_trial=options.gpus_per_trial,
                       accelerator=options.ray_accelerator, notice=notice)


def gpu_slots(gpus: list[int], per_trial: int) -> list:
    """What each concurrently running trial gets: one GPU index, or with per_trial > 1 a disjoint tuple
    (`per_trial` divides the number of GPUs: SweepOptions checks it)."""
    if per_trial == 1:
        return list(gpus)
    return [tuple(gpus[i:i + per_trial]) for i in range(0, len(gpus), per_trial)]


def _probe_all(pythons: list[str], runner: Executor,
               confs: list[AllocConf]) -> tuple[list[ProbeResult], list[SettingsCheck | None]]:
    """Probe each interpreter, its torch judging `confs` in the same child where it can; make environment ids
    unique when two run the same torch."""
    probes, checks, seen = [], [], set()
    for python in pythons:
        p, check = runner.call(probe_and_judge, python, confs)
        if p.env_id in seen:
            p = replace(p, env_id=f"{p.env_id}@{p.python}")
        seen.add(p.env_id)
        probes.append(p)
        checks.append(check)
    return probes, checks


def _resolve_backend(backend: Backend, probes: list[ProbeResult], notice: Callable[[str], None]) -> Backend:
    has_gpu = all(p.cuda_available and p.device_count > 0 for p in probes)
    if backend == Backend.AUTO:
        if has_gpu:
            return Backend.CUDA
        notice(OptionText("No CUDA GPU is visible: judging the grid by replaying a recorded allocation trace through "
                          "the simulator. Figures are replayed (peak memory only, no throughput); confirm on a GPU "
                          "with {backend} {cuda}.", cuda=Backend.CUDA))
        return Backend.SIM
    if backend in (Backend.CUDA, Backend.HYBRID) and not has_gpu:
        missing = [p.python for p in probes if not (p.cuda_available and p.device_count)]
        raise OptionError("backend", "{backend} {got} needs a CUDA GPU, but none is visible to {missing}; use "
                          "{backend} {sim}", got=backend, missing=", ".join(missing), sim=Backend.SIM)
    return backend


def _check_machines(options: SweepOptions, backend: Backend, probes: list[ProbeResult], recording: bool) -> None:
    """What the probed interpreters' machines must offer for the options given."""
    if recording and options.executor != ExecutorKind.LOCAL:
        raise OptionError("executor", "a hybrid sweep records its trace on this machine's GPU: with {executor} "
                          "{ray}, record one first ('alloctune record') and pass it with {trace}",
                          ray=ExecutorKind.RAY)
    visible = min(p.device_count for p in probes)
    if backend != Backend.SIM and (bad := [g for g in options.gpus or (0,) if not 0 <= g < visible]):
        raise OptionError("gpus", "{gpus} {bad}: only {visible} GPU(s) visible", bad=",".join(map(str, bad)),
                          visible=visible)


def _settings(plan: Plan, checks: list[SettingsCheck | None], options: SweepOptions, spec: WorkloadSpec,
              notice: Callable[[str], None]) -> tuple[dict[str, list[AllocConf]], list[Skipped]]:
    """Per interpreter, the settings the torch it runs or replays accepts (`_judged`; `checks`: its verdicts from
    the probe), and those skipped, with why. A setting the user named that the torch rejects stops the sweep."""
    named = bool(options.grid or spec.grid)   # settings the user chose, not the default grid
    planned, skipped = {}, []
    for p, check in zip(plan.probes, checks):
        verdict = _judged(plan, p, check)
        valid, skips = apply_rules(plan.confs, verdict.torch_version, has_budget=options.budget is not None,
                                   accepted=verdict.verdicts)
        if named:
            refuse_rejected(skips, verdict.torch_version)
            for s in skips:   # valid but pointless: still skipped, but the user asked for it, so say so now
                notice(f"you named {s.conf!r}, but it will not run: {s.reason}")
        planned[p.env_id] = valid
        skipped += [Skipped(s.conf, s.reason, plan.replay_env_id(p) if plan.backend == Backend.SIM else p.env_id,
                            s.problem.id if s.problem else None, s.problem.source if s.problem else None)
                    for s in skips]
    return planned, skipped


def _judged(plan: Plan, p: ProbeResult, check: SettingsCheck | None) -> SettingsCheck:
    """`p`'s verdicts on the grid: its own torch's (`check`, from the probe, else asked here), or, where its replays
    follow the trace's torch (a sweep that only replays), that torch's, as `search` and `sweep --search` judge."""
    def interpreter(confs) -> SettingsCheck:
        return check if check is not None else plan.runner.call(check_settings_detail, p.python, list(confs))
    if plan.told:
        return interpreter(plan.confs)
    assert plan.replayed is not None
    return plan.target(p, plan.replayed[0]).judge(p.torch_version, interpreter)(plan.confs)


def _load_replay_trace(spec: WorkloadSpec, trace_path: str | None, notice: Callable[[str], None],
                       typed: str | None) -> tuple[list[Trace], dict[str, Any]]:
    """The trace to replay (the `trace` option, else the workload's), checked before any results folder exists;
    with its identity for sweep.json, so that a sweep of another trace never resumes this one."""
    path = trace_path or spec.trace
    if not path:
        raise AlloctuneError(_no_trace_hint(spec, typed))
    try:
        trace = load_trace(path)
    except SeveralDevices as exc:   # a sweep has no option that chooses one: its trace is one GPU's
        raise TraceError(f"{exc.where!r} has allocations on devices {exc.devices}: a sweep replays one GPU's trace; "
                         f"record one with `alloctune record`, or replay one device of it with `alloctune replay "
                         f"--device N`") from None
    recorded_from = trace.meta.get("workload")
    if recorded_from is None:   # a plain torch snapshot: nothing says whose it is, so trust the user, aloud
        notice(f"the trace {path} carries no alloctune metadata (a snapshot recorded outside alloctune): "
               f"replaying it as {spec.name}'s")
    elif recorded_from != spec.name:
        raise AlloctuneError(f"the trace {path} was recorded from workload {recorded_from!r}, not {spec.name!r}: "
                             f"its numbers would be stored as {spec.name}'s; pass a trace of {spec.name}")
    elif trace.meta.get("workload_hash") and trace.meta["workload_hash"] != spec.digest():
        _other_definition(spec, path, trace.meta["workload_hash"], notice)
    for warning in trace.warnings:
        notice(f"trace: {warning}")
    # read again, so a file: a sweep is resumed by it (a FIFO, read once, is refused here, before any folder exists)
    sha256 = sha256_of(path, MAX_SNAPSHOT_BYTES, "a trace", TraceError)[:16]
    return [trace], {"path": str(path), "sha256": sha256}


def _other_definition(spec: WorkloadSpec, path: str, recorded: str, notice) -> None:
    """A trace of the sweep's workload recorded under another definition: another preset, or parameters no preset
    of the file has, is refused (its figures would be stored as this one's, in this one's folder); the file's own
    preset, where the sweep was given that preset's definition as it stood earlier (an older folder's sweep.json),
    is replayed with a notice."""
    from ..workload.loader import preset_of

    theirs = preset_of(spec.source, recorded) if spec.source else None
    ours = f"preset {spec.preset!r}" if spec.preset else "the file's parameters"
    if theirs is not None and theirs == spec.preset:
        notice(f"the trace {path} was recorded from {spec.name}'s preset {theirs!r} as the file now defines it, "
               f"which this sweep's definition differs from: replaying it anyway")
        return
    said = f"preset {theirs!r} of {spec.name}" if theirs else f"another definition of {spec.name} (other parameters)"
    hint = "sweep that preset ({preset} %s), or " % theirs if theirs and re.fullmatch(r"[\w.-]+", theirs) else ""
    raise AlloctuneError(OptionText("the trace {path} was recorded from {said}, not {ours}: its figures would be "
                                    "stored as this sweep's; " + hint + "pass a trace recorded from {ours}",
                                    path=path, said=said, ours=ours))


def _no_trace_hint(spec: WorkloadSpec, typed: str | None) -> OptionText:
    """What to do when there is no trace to replay: sweep a preset that ships one, else record one; the file named
    as the user gave it (`typed`: '-' for standard input, which `record -` reads again), else by its absolute path
    (a WorkloadSpec given), else by a stand-in (a WorkloadSpec made in Python: no file to record)."""
    from ..workload.loader import presets_with_trace

    where = shlex.quote(typed or spec.source or "WORKLOAD.yaml")
    preset = f" --preset {spec.preset}" if spec.preset else ""
    again = " (with the workload on standard input again)" if where == "-" else ""
    what = f"workload {spec.name!r}" + (f" (preset {spec.preset!r})" if spec.preset else "")
    shipped = presets_with_trace(spec.source) if spec.source else []
    if shipped:
        return OptionText("{what} has no recorded allocation trace to replay; preset {shipped!r} ships one: "
                          "alloctune sweep {where} --preset {shipped} (or record this one on a GPU machine: "
                          "alloctune record {where}{preset} -o trace.xz, then pass {trace=trace.xz})",
                          what=what, shipped=shipped[0], where=where, preset=preset)
    return OptionText("{what} has no recorded allocation trace to replay: record one on a GPU machine with "
                      "'alloctune record {where}{preset} -o trace.xz'{again}, then pass it with {trace=trace.xz}",
                      what=what, where=where, preset=preset, again=again)
