"""Results side by side across folders and environments (torch versions, GPUs, interpreters): a comparison's rows
and columns (`Comparison`, as api/compare.py groups the folders' trials: a row is a workload and a setting, a
column one environment of one results folder), and what qualifies each mark in words (`note`), once, from its code
and the cells' figures. The first column is the baseline; every other cell is judged against the baseline cell of
its row by `decide/regression.judge` (its marks are listed there).

`compare_output.py` shows a comparison: the terminal table, compare.md and compare.png.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..decide.regression import Cell, Delta, Mark, Why
from ..results.folder import SweepInfo
from ..results.records import Backend, ThroughputSource
from ..results.vocabulary import BASIS, SETTING, SIMULATED_TORCH, Basis, setting_name
from ..settings.conf import conf_label
from ..sim.target import simulated_torch
from ..units import format_bytes
from .words import TIME_SOURCES, skipped_words

@dataclass(frozen=True)
class Column:
    key: tuple[int, str, str]
    label: str
    folder: Path
    env_id: str
    backend: str
    torch_version: str | None         # the torch that ran it; for a replay, the torch whose allocator was simulated
    best: str | None                  # the setting choice.json chose here ('' = default); None when none
    best_note: str = ""               # why there is no best, or the choice's first reason
    trace_torch: str | None = None    # a replay: the torch the trace was recorded with
    budget_bytes: int | None = None


@dataclass
class Row:
    workload: str
    conf: str
    cells: list[Cell | None]          # one per column; None where the setting has no trials
    missing: list[str]                # per column: why there is no cell ('' where there is one)
    deltas: list[Delta] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # per column: what qualifies its mark, in words (`note`)

    @property
    def label(self) -> str:
        return conf_label(self.conf)


@dataclass
class Comparison:
    columns: list[Column]
    rows: list[Row]
    factor: float

    def best_changed(self, index: int) -> bool | None:
        """Whether column `index` chose a different setting than the baseline; None when either chose none."""
        a, b = self.columns[0].best, self.columns[index].best
        return None if a is None or b is None else a != b

    def marks(self) -> Counter:
        return Counter(d.mark for row in self.rows for d in row.deltas[1:])

    def to_json(self) -> dict:
        """Everything the tables show, as plain data (`compare --json`): columns (each with the basis of its
        figures, and for a replay the torch it followed), rows with their cells and deltas against the baseline
        column, and per column whether the best setting changed; settings named as every command's --json names
        them (results/vocabulary.py)."""
        data = json.loads(json.dumps(asdict(self), default=str))
        data["best_changed"] = [self.best_changed(i) for i in range(len(self.columns))]
        for column, c in zip(data["columns"], self.columns):
            replayed = c.backend == Backend.SIM.value
            column.update({"best": None if c.best is None else setting_name(c.best),
                           BASIS: Basis.of_trials(replayed).value})
            if replayed:
                column[SIMULATED_TORCH] = simulated_torch(c.torch_version)
        for row in data["rows"]:
            row[SETTING] = setting_name(row[SETTING])
        return data


def why_missing(info: SweepInfo, workload: str, conf: str, env_id: str) -> str:
    """Why a setting has no cell in a column of that folder, in words."""
    if workload != info.workload_name:
        return f"no {workload} results here"
    skipped = info.skipped_as(conf, env_id)
    if skipped is not None:
        return f"skipped: {skipped_words(skipped)}"
    return "not run" if conf in {str(c) for c in info.settings} else "not in its grid"


def budget_label(n: int | None) -> str:
    return "none" if n is None else format_bytes(n)


def _failed(c: Cell, was: str = "") -> str:
    return f"{was}{c.failure} in {c.failed} of {c.trials} trials"


def note(row: Row, j: int, columns: list[Column]) -> str:
    """What qualifies column `j`'s mark in `row`, in words ('' where nothing does): its `Why` said from the two
    cells' figures."""
    delta, a, b = row.deltas[j], row.cells[0], row.cells[j]
    budgets = (f"budget differs ({budget_label(delta.budgets[0])} vs {budget_label(delta.budgets[1])})"
               if delta.budgets else "")
    if delta.why is Why.MISSING:
        side = 0 if a is None else j
        return f"{row.missing[side]} in {columns[side].label}"
    if a is None or b is None:
        return ""
    if delta.why is Why.WORKLOAD_DIFFERS:
        return f"workload definition differs ({a.workload_hash[:12]} vs {b.workload_hash[:12]})"
    if delta.why is Why.FAILED:
        failed = {Mark.BOTH_FAIL: f"{a.failure} / {b.failure}", Mark.NEW_FAILURE: _failed(b),
                  Mark.FIXED_FAILURE: _failed(a, "was ")}[delta.mark]
        return "; ".join(p for p in (failed, budgets) if p)
    if delta.why is Why.BUDGET_DIFFERS:
        return f"{budgets}; both fit, and peaks under different limits do not compare"
    if delta.why is Why.METHOD_DIFFERS:
        return (f"throughput measured differently, not compared (memory alone decides the mark): "
                f"{columns[0].label}: {_method(a)}; {columns[j].label}: {_method(b)}")
    return "too few repeats to test throughput" if delta.why is Why.UNTESTED else ""


def _method(c: Cell) -> str:
    """How a cell's throughput was measured: its source, in summary.md's words, and its unit."""
    source = TIME_SOURCES[ThroughputSource(c.source)] if c.source else "its source not recorded"
    return f"{source}, in {c.unit or 'units'}/s"
