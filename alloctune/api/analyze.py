"""`analyze()`: decide again from a results folder's recorded trials and rewrite what the decision says (choice.json,
summary.md, plot.png and, for a finished sweep, best.env), with what that changed against what the folder held;
measures nothing. What `alloctune report` runs on each folder, and the last step of `sweep()` (`decide_folder`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..decide.changed import ChoiceChange, choice_changes
from ..decide.choice import Choice
from ..decide.decision import FolderDecision, decide
from ..decide.parameters import check_max_slowdown
from ..decide.summary import SettingResult
from ..errors import ResultsError
from ..report.analysis import choice_json, choice_record, write_folder
from ..results.choices import ChoiceRecord
from ..results.folder import ResultsFolder, results_folder
from ..sweeper.confirm import folder_calibration
from .options import options_of


@dataclass(frozen=True)
class AnalyzeOptions:
    max_slowdown: float | None = None   # instead of the sweep's own (sweep.json keeps what was asked; choice.json
                                        # the allowance the decision applied)

    def __post_init__(self) -> None:
        if self.max_slowdown is not None:
            check_max_slowdown(self.max_slowdown)


@dataclass(frozen=True)
class Analysis:
    """A folder decided again: its settings and choices (as `sweep()`'s outcome holds them), and what changed."""

    folder: ResultsFolder
    settings: list[SettingResult]
    choices: list[Choice]
    changes: list[ChoiceChange]            # each decision group whose setting differs from the one the folder held
    best_env: tuple[list[str], list[str]]  # best.env's settings before and after (equal: unchanged)

    def to_json(self) -> dict[str, Any]:
        """As `report --json` prints it: the decisions, what changed and best.env's settings where they did."""
        before, after = self.best_env
        return dict(decisions(self.folder, self.choices), changed=[c.to_json() for c in self.changes],
                    best_env_changed={"before": before, "after": after} if before != after else None)


def decisions(folder: ResultsFolder, choices: list[Choice]) -> dict[str, Any]:
    """A folder's decisions as `--json` prints them (report, sweep): as choice.json holds them, with schema 1's keys
    beside (`report/analysis.choice_json`)."""
    return {"folder": str(folder.path), "choices": [choice_json(c) for c in choices]}


def analyze(folder: ResultsFolder | str | os.PathLike, options: AnalyzeOptions | None = None,
            **fields: Any) -> Analysis:
    """Decide again from the folder's recorded trials alone and write what it says. `folder`: a results folder (as
    `sweep()` returns it) or its path; `options` (an AnalyzeOptions) or its fields as keywords:
    `analyze(folder, max_slowdown=0.05)`. The decision and best.env the folder held are read under the same writer
    lock the new ones are written with, so no sweep or report writes the folder in between (FolderBusy while one
    does)."""
    options = options_of("analyze", AnalyzeOptions, options, fields)
    folder = results_folder(folder)
    with folder.lock():
        folder.settle()   # a batch a killed writer committed is in place before what the folder held is read
        held, env = _held(folder), _env_settings(folder)
        decision = decide_folder(folder, options.max_slowdown)
        after = _env_settings(folder) if held else env   # a folder that held no choice had nothing to change
    changes = choice_changes(held, [choice_record(c) for c in decision.choices])
    return Analysis(folder, decision.settings, decision.choices, changes, (env, after))


def decide_folder(folder: ResultsFolder, max_slowdown: float | None) -> FolderDecision:
    """Decide from the folder's trials and write what the decision says, those files together or not at all (not
    while a sweep writes the folder; a sweep calls this holding the lock itself)."""
    with folder.together():
        info = folder.info()
        decision = decide(info, folder.recorded_trials(), max_slowdown, folder_calibration(folder))
        write_folder(folder, info, decision)
    return decision


def _held(folder: ResultsFolder) -> list[ChoiceRecord]:
    """With the writer lock held: the decision a folder holds before it is decided again: none where it has none,
    or one that cannot be read (the new one replaces it)."""
    try:
        return folder.choices() if folder.has_choice() else []
    except ResultsError:
        return []


def _env_settings(folder: ResultsFolder) -> list[str]:
    """best.env's settings: its lines but the comments (which name the folder and the alloctune that wrote it)."""
    return [line for line in folder.best_env().splitlines() if line.strip() and not line.startswith("#")]
