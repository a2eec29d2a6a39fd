"""A results folder decided: from its sweep.json and its recorded trials alone, the per-setting results and one
`Choice` per (environment, backend, budget), with what the sweep planned and how precise it got. Pure: writing
what the folder says about it is report/'s (`report/analysis.py`), and the sweeper puts the two together
(`sweeper/sweep.analyze`)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..results.calibration import Calibration
from ..results.folder import SweepInfo
from ..results.records import TrialRecord, measured_env_id
from .choice import Choice, choose
from .confirm import confirmed
from .parameters import DEFAULT_TIE, max_slowdown_of
from .planned import planned_trials, recorded_trials
from .precision import precision
from .speed import predictions
from .summary import SettingResult, summarize_settings


@dataclass(frozen=True)
class FolderDecision:
    settings: list[SettingResult]
    choices: list[Choice]
    max_slowdown: float   # the allowance applied (the sweep's own, or the one asked again)
    calibration: Calibration | None = None   # what the predicted speeds rest on (calibration.json)
    tie: float = DEFAULT_TIE


def decide(info: SweepInfo, trials: list[TrialRecord], max_slowdown: float | None = None,
           calibration: Calibration | None = None) -> FolderDecision:
    """Decide from the recorded trials. `max_slowdown`: instead of the sweep's own (sweep.json keeps what was
    asked; the override lives with the decision). `calibration`: the one the sweep used (calibration.json), for
    each replayed setting's predicted speed; a confirmed sweep's winner resting on one pair is judged against it."""
    allowance = max_slowdown_of(max_slowdown, info.max_slowdown)
    settings = summarize_settings(trials, allowance)
    predicted = predictions(trials, calibration) if calibration is not None else {}
    choices = []
    for c in choose(settings, horizon=info.repeats if info.auto_repeats else None):
        c = replace(c, trials_recorded=recorded_trials(trials, c.env_id, c.backend),
                    trials_planned=planned_trials(info, c.env_id, c.backend), finished=info.finished is not False,
                    predictions=predicted.get(measured_env_id(c.env_id), {}))
        c = replace(c, precision=precision(c, auto=info.auto_repeats, max_repeats=info.repeats))
        choices.append(confirmed(c, c.predictions) if info.confirm else c)
    return FolderDecision(settings, choices, allowance, calibration)
