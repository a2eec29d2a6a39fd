"""`alloctune fit -- COMMAND` on a GPU: the user's command recorded once at each value of its parameter (a --steps
window is enough), or traced by a dry run without one (alloctune/dryrun: `dry_run`, the card it stands for), and
the answers confirmed: under each budget, the predicted largest value and the next one run
in fresh processes as a sweep's trials run (the budget applied as sweeps apply it), and whether the GPU agreed;
where it did not, a few more runs find the largest value that runs (decide/fit.search_next). Every recording is
made by `record_value` (the one step a dry run replaces), under the default setting, stamped with the command.

The value goes where the command says `{param}`; a command that says it nowhere gets it in the environment
variable of the parameter's name. A recording already in the folder (`trace.<param>-<value>.xz`) is kept: running
the same fit again records only the values it lacks; one that says it is another command's, or a dry run where
the fit records on the GPU (or the other way round, or a dry run for another card), is refused.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from ..decide.fit import SEARCH_RUNS, search_next
from ..errors import AlloctuneError, ResultsError, shown
from ..results.provenance import provenance
from ..results.fits import Answer, Confirmation, FitFile, LimitFit
from ..results.names import fit_trace, fit_trace_value
from ..results.records import TrialState
from ..settings.conf import AllocConf
from ..sim.trace import Trace, load_trace
from ..trial.launch import run_trial
from ..trial.probe import ProbeFn   # a fit's `probe.Probes`: its command's interpreter probed once
from ..trial.recording import card_name, record_command, refuse_without_gpu
from ..trial.task import TrialTask
from ..units import parse_budget
from ..workload.command import check_command, command_workload, target_python
from ..workload.spec import DEFAULT_TIMEOUT_S, DEFAULT_WARMUP_STEPS
from .fitting import TraceFacts

Say = Callable[[str], None]   # a line of progress for the user
T = TypeVar("T")
DRY_RUNNING = "dry run (no GPU)"   # what a fit's progress says of a value a dry run traces


def at_value(command: Sequence[str], param: str, value: int) -> tuple[list[str], dict[str, str]]:
    """The command and the variables it gets for one value (the module's rule)."""
    mark = "{" + param + "}"
    if any(mark in word for word in command):
        return [word.replace(mark, str(value)) for word in command], {}
    return list(command), {param: str(value)}


def stamp(command: Sequence[str], param: str, value: int) -> dict:
    """What a fit's recording says of itself (meta 'fit'): the command it ran, with {param}, and the value."""
    return {"command": list(command), "param": param, "value": value}


def record_values(command: Sequence[str], param: str, values: Sequence[int], folder: Path, *, gpu: int = 0,
                  timeout_s: float | None = None, warmup_steps: int = DEFAULT_WARMUP_STEPS, steps: int = 0,
                  say: Say = lambda line: None, dry_run: str | None = None,
                  probes: ProbeFn) -> dict[int, tuple[str, TraceFacts]]:
    """One recording per value, kept in `folder` (a recording kept there already is used again, unless it says it
    is another command's or another kind, and so are those an earlier fit made there at other values): value ->
    (its path, its facts), each trace dropped once its facts are read. Refused before the first run when the
    command's interpreter sees no GPU (a folder holding every recording needs none), unless a dry run (`dry_run`,
    the card it stands for) traces each value without one."""
    if dry_run is None and not all((folder / fit_trace(param, value)).exists() for value in values):
        refuse_without_gpu(at_value(command, param, values[0])[0], probes=probes)
    made = [v for name in (os.listdir(folder) if folder.is_dir() else []) if (v := fit_trace_value(name, param))]
    out = {}
    for value in sorted({*values, *made}):
        path = folder / fit_trace(param, value)
        if path.exists():
            out[value] = (str(path), TraceFacts.of(kept(path, command, param, value, dry_run)))
            say(f"{param}={value}: kept {'dry run' if dry_run else 'recording'} {path}")
            continue
        say(f"{param}={value}: {DRY_RUNNING if dry_run else 'recording'}")
        name, trace = record_value(command, param, value, folder, gpu=gpu, timeout_s=timeout_s,
                                   warmup_steps=warmup_steps, steps=steps, dry_run=dry_run, probes=probes)
        out[value] = (name, TraceFacts.of(trace))
    return out


def kept(path: Path, command: Sequence[str], param: str, value: int, dry_run: str | None = None) -> Trace:
    """A recording kept in a fit's folder, refused where it says it was recorded for another command or value, or
    is not what this fit makes: a recording on the GPU, or a dry run for the card `dry_run` names."""
    trace = load_trace(path)
    said = trace.meta.get("fit")
    if said is not None and said != stamp(command, param, value):
        ran = said.get("command") if isinstance(said, dict) else None
        raise ResultsError(f"{path} was recorded for another command ({shown(' '.join(map(str, ran or [])), 60)}): "
                           f"give another --out")
    made = provenance(trace.meta, f"{path}: meta 'dry_run'", ResultsError).dry_run
    wanted = card_name(dry_run) if dry_run is not None else None
    if (made and made.card) != wanted:
        what = f"a dry run for {made.card}" if made else "recorded on a GPU"
        fit = f"makes dry runs for {wanted}" if wanted else "records on the GPU"
        raise ResultsError(f"{path} is {what}, and this fit {fit}: give another --out")
    return trace


def record_value(command: Sequence[str], param: str, value: int, folder: Path, *, gpu: int = 0,
                 timeout_s: float | None = None, warmup_steps: int = DEFAULT_WARMUP_STEPS,
                 steps: int = 0, dry_run: str | None = None, probes: ProbeFn) -> tuple[str, Trace]:
    """The command recorded once at `value` under the default setting (or traced by a dry run for the card
    `dry_run` names: trial/recording.record_command's), kept in `folder` (names.fit_trace) and stamped with what it
    ran (`stamp`): its path and trace. Every recording a fit makes is made here."""
    path = folder / fit_trace(param, value)
    argv, env = at_value(command, param, value)
    traces = record_command(argv, path, gpus=gpu, timeout_s=timeout_s, warmup_steps=warmup_steps, steps=steps,
                            env=env, dry_run=dry_run, meta={"fit": stamp(command, param, value)}, probes=probes)
    if len(traces) != 1:
        for written, _ in traces:
            written.unlink()
        raise AlloctuneError(f"{param}={value}: the command ran {len(traces)} processes that use CUDA; fit "
                             f"answers for one: record the ranks with 'alloctune record' and fit one rank's "
                             f"traces with --trace VALUE=FILE")
    return str(path), traces[0][1]


def gpu_seen(command: Sequence[str], param: str, value: int, probes: ProbeFn) -> bool:
    """Whether the command's interpreter sees a GPU (as `refuse_without_gpu` judges it) at `value`."""
    try:
        refuse_without_gpu(at_value(command, param, value)[0], probes=probes)
    except AlloctuneError:
        return False
    return True


def confirm(fit: FitFile, command: Sequence[str], confs: Sequence[AllocConf], *, gpu: int = 0,
            timeout_s: float | None = None, warmup_steps: int = DEFAULT_WARMUP_STEPS, steps: int = 0,
            say: Say = lambda line: None, before: FitFile | None = None, probes: ProbeFn) -> FitFile:
    """`fit` with each budget's answers for `confs` confirmed on the GPU: the largest value and the next one, and
    where the GPU disagrees, up to SEARCH_RUNS more to find the largest value that runs (decide/fit.search_next).
    What `before` (the same fit's fit.json, from an earlier run) confirmed of the same answer is kept, not run
    again, as recordings are."""
    refuse_without_gpu(at_value(command, fit.param, fit.values[0])[0], dry_run_instead=False, probes=probes)

    def confirmed(limit: LimitFit, earlier: LimitFit | None, answer: Answer) -> list[Confirmation]:
        if kept := _kept(earlier, answer):
            say(f"budget {limit.budget}, {answer.setting.label}: kept the confirmation of {fit.param}="
                f"{', '.join(str(c.value) for c in kept)}")
            return kept
        return _checked(command, fit, limit, answer, gpu, timeout_s, warmup_steps, steps, say)

    return replace(fit, limits=[limit if found is None else replace(limit, confirmed=found)
                                for limit, found in each_budget(fit, before, confs, confirmed)])


def each_budget(fit: FitFile, before: FitFile | None, confs: Sequence[AllocConf],
                run: Callable[[LimitFit, LimitFit | None, Answer], list[T]]) -> list[tuple[LimitFit, list[T] | None]]:
    """Each limit of `fit` with what `run` gives for each of its answers for `confs` (with the same limit of an
    earlier run, `before`), in order; a limit without a budget (a card's) with None: only budgets are run on the
    GPU. What `confirm` and the copies at once (fitcopies.py) share."""
    out: list[tuple[LimitFit, list[T] | None]] = []
    for limit in fit.limits:
        if limit.budget is None:
            out.append((limit, None))
            continue
        earlier = same_limit(before, limit)
        out.append((limit, [x for a in limit.answers if a.setting in confs for x in run(limit, earlier, a)]))
    return out


def same_limit(before: FitFile | None, limit: LimitFit) -> LimitFit | None:
    """The limit of an earlier run of the same fit that is `limit`: the same budget on the same GPU."""
    return next((lim for lim in (before.limits if before else []) if lim.budget == limit.budget
                 and lim.budget_bytes == limit.budget_bytes), None)


def _kept(earlier: LimitFit | None, answer: Answer) -> list[Confirmation]:
    """What `earlier` confirmed of this setting's answer, where it checked the same values (else nothing)."""
    mine = [c for c in (earlier.confirmed if earlier else []) if c.conf == answer.conf]
    checks = [c.value for c in mine if not c.searched]
    return mine if checks == [v for v in (answer.largest, answer.next_value) if v is not None] else []


def _checked(command: Sequence[str], fit: FitFile, limit: LimitFit, answer: Answer, gpu: int,
             timeout_s: float | None, warmup_steps: int, steps: int, say: Say) -> list[Confirmation]:
    """One setting's answer under one budget run on the GPU: its two checks, then the search where they disagree."""
    def run(value: int, searched: bool) -> Confirmation:
        why = "the GPU disagreed, searching: " if searched else ""
        say(f"budget {limit.budget}, {answer.setting.label}: {why}running {fit.param}={value}")
        return _run(command, fit.param, value, answer.setting, limit, gpu, timeout_s, warmup_steps, steps,
                    answer.largest is not None and value <= answer.largest, searched)

    done = [run(v, False) for v in ([answer.largest] if answer.largest is not None else []) + [answer.next_value]]
    for _ in range(SEARCH_RUNS):
        if any(c.said is None for c in done):
            break   # a run that crashed or timed out says nothing of memory, and the next would likely do the same
        value = search_next([(c.value, c.runs) for c in done], fit.step)
        if value is None:
            break
        done.append(run(value, True))
    return done


def _run(command: Sequence[str], param: str, value: int, conf: AllocConf, limit: LimitFit, gpu: int,
         timeout_s: float | None, warmup_steps: int, steps: int, predicted: bool, searched: bool) -> Confirmation:
    task = trial_task(command, param, value, conf, limit.budget, timeout_s, warmup_steps, steps)
    record = run_trial(task, gpu)
    m = record.measurement
    runs = record.state is TrialState.OK and m is not None and not m.num_ooms and not m.num_alloc_retries
    return Confirmation(str(conf), value, predicted, record.state.value, runs,
                        None if m is None else m.peak_reserved_bytes, None if m is None else m.num_alloc_retries,
                        record.error, searched)


def trial_task(command: Sequence[str], param: str, value: int, conf: AllocConf, budget: str | None,
               timeout_s: float | None, warmup_steps: int, steps: int) -> TrialTask:
    """The trial of the command at `value` under `conf` and `budget` (None: none), as a sweep's trials run."""
    argv, env = at_value(command, param, value)
    checked = check_command(argv, env=env)
    spec = command_workload(checked, warmup_steps=warmup_steps, steps=steps)
    budget_bytes, fraction = parse_budget(budget) if budget else (None, None)
    return TrialTask(spec.to_dict(), spec.digest(), conf, 0, target_python(checked), "fit",
                     budget_bytes, fraction, timeout_s or DEFAULT_TIMEOUT_S)
