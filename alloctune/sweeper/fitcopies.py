"""Copies at once, confirmed on the GPU (`fit --confirm-copies VALUE`): under each budget and for each setting
confirmed, as many copies of the command at VALUE as the fit predicts fit at once (`Answer.copies`: the budget and one
context shared among them, each copy its least room and its context) are started together, each a trial in a
fresh process under the setting (as `fitrun.confirm` runs one), while a ballast process holds the GPU's memory but
what the prediction shares among them (trial/ballast.py), as a card of that size would. They fit when every copy
finishes without an OOM and without an alloc retry. At most MAX_COPIES run at once; a prediction of more, or of none,
is recorded as not run, with why.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Sequence

from ..errors import AlloctuneError
from ..results.fits import Answer, CopiesConfirmation, CopyRun, FitFile, LimitFit
from ..results.records import TrialRecord, TrialState
from ..settings.conf import AllocConf
from ..trial.ballast import ballast
from ..trial.launch import run_trial
from ..trial.probe import ProbeFn
from ..trial.recording import refuse_without_gpu
from ..units import format_bytes
from ..workload.spec import DEFAULT_WARMUP_STEPS
from .fitrun import Say, at_value, each_budget, trial_task

MAX_COPIES = 16   # processes started together at most: a prediction of more is a job too small to need the answer


def confirm_copies(fit: FitFile, command: Sequence[str], confs: Sequence[AllocConf], value: int, *, gpu: int = 0,
                   timeout_s: float | None = None, warmup_steps: int = DEFAULT_WARMUP_STEPS, steps: int = 0,
                   say: Say = lambda line: None, before: FitFile | None = None, probes: ProbeFn) -> FitFile:
    """`fit` with the copies at once at `value` (a recorded value) run together under each budget for `confs`;
    what `before` (the same fit's fit.json) ran of the same copies is kept, not run again."""
    refuse_without_gpu(at_value(command, fit.param, value)[0], dry_run_instead=False, probes=probes)

    def together(limit: LimitFit, earlier: LimitFit | None, answer: Answer) -> list[CopiesConfirmation]:
        k = answer.copies[fit.values.index(value)]
        kept = next((c for c in (earlier.copies_confirmed if earlier else [])
                     if (c.conf, c.value, c.predicted) == (answer.conf, value, k) and c.runs), None)
        return [kept or _together(command, fit, limit, answer, value, gpu, timeout_s, warmup_steps, steps, say)]

    return replace(fit, limits=[limit if done is None else replace(limit, copies_confirmed=done)
                                for limit, done in each_budget(fit, before, confs, together)])


def _together(command: Sequence[str], fit: FitFile, limit: LimitFit, answer: Answer, value: int, gpu: int,
              timeout_s: float | None, warmup_steps: int, steps: int, say: Say) -> CopiesConfirmation:
    """One setting's copies at once under one budget, run together."""
    k = answer.copies[fit.values.index(value)]
    leave = limit.capacity_bytes + fit.overhead_bytes   # what the prediction shares among the copies
    if not 1 <= k <= MAX_COPIES:
        why = "none is predicted to fit" if k == 0 else f"more than {MAX_COPIES} processes at once are not run"
        return CopiesConfirmation(answer.conf, value, k, None, [], why)
    task = trial_task(command, fit.param, value, answer.setting, None, timeout_s, warmup_steps, steps)
    say(f"budget {limit.budget}, {answer.setting.label}: running {k} copies of {fit.param}={value} together in "
        f"{format_bytes(leave)}")
    try:
        with ballast(task.python, gpu, leave) as free:
            with ThreadPoolExecutor(k) as pool:
                records = list(pool.map(lambda _: run_trial(task, gpu), range(k)))
    except AlloctuneError as exc:
        return CopiesConfirmation(answer.conf, value, k, None, [], str(exc))
    return CopiesConfirmation(answer.conf, value, k, free, [_copy(r) for r in records])


def _copy(record: TrialRecord) -> CopyRun:
    m = record.measurement
    runs = record.state is TrialState.OK and m is not None and not m.num_ooms and not m.num_alloc_retries
    return CopyRun(record.state.value, runs, None if m is None else m.peak_reserved_bytes,
                   None if m is None else m.num_alloc_retries, record.error)
