"""A decision as the one record every consumer reads (`results/choices.ChoiceRecord`, which choice.json stores):
built here from the choice (`choice.py`), with every setting's figures as `summary.py` computed them and the reasons
as data. No words: report/ adds the reasons' sentences (`report/words.worded`) and shows the record."""
from __future__ import annotations

from dataclasses import fields

from ..results.choices import ChoiceRecord, RunnerUp
from ..results.figures import SettingFigures
from .choice import Choice
from .safety import target_torch
from .summary import SettingResult


def figures(s: SettingResult) -> SettingFigures:
    """`s`'s figures alone: its `SettingFigures` part, each field as computed, without the trials behind it."""
    return SettingFigures(**{f.name: getattr(s, f.name) for f in fields(SettingFigures)})


def decision_record(choice: Choice) -> ChoiceRecord:
    """The decision as choice.json keeps it, its reasons as data (their words empty: `report/words.worded`)."""
    best = choice.best
    return ChoiceRecord(
        env_id=choice.env_id, backend=choice.backend, conf=best.conf if best is not None else None,
        workload=choice.workload, workload_hash=choice.workload_hash, budget_bytes=choice.budget_bytes,
        # A replay follows the torch it was simulated as, not the one the trace was recorded with.
        torch_version=target_torch(choice.env), features=tuple(f.value for f in choice.features), env=choice.env,
        settings=tuple(figures(s) for s in choice.group),
        verdict=choice.verdict, throughput_ratio=choice.throughput_ratio, detectable_slowdown=choice.detectable,
        runners_up=tuple(RunnerUp(s.conf, why_data=why.record()) for s, why in choice.runners_up),
        decision_data=choice.decision.record(), reasons_data=tuple(r.record() for r in choice.reasons),
        precision_data=choice.precision.record() if choice.precision is not None else None,
        max_slowdown=choice.max_slowdown, tie=choice.tie,
        complete=choice.complete, trials_recorded=choice.trials_recorded, trials_planned=choice.trials_planned,
        predictions={conf: p.to_json() for conf, p in choice.predictions.items()},
    )
