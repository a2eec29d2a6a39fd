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
from ..sim.target import simulated_torch, simulated_with
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
    budget_bytes: int | None = None   # its trials' budget (`regression.budget_of`)
    budget_fraction: float | None = None   # where the sweep gave its budget as a fraction of the device

    @property
    def budget(self) -> str:
        """Its budget in words: as the sweep was given it, with its bytes where known (`budget_label`)."""
        return budget_label(self.budget_bytes, self.budget_fraction)

    @property
    def replayed(self) -> bool:
        return self.backend == Backend.SIM.value

    @property
    def basis(self) -> str:
        """What its figures rest on, as every command says it: "measured with torch 2.11.0+cu130", "replayed with
        torch 2.11's allocator"."""
        if self.replayed:
            return simulated_with(self.torch_version)
        return f"measured with torch {self.torch_version}" if self.torch_version else Basis.MEASURED.value


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
        """How many cells have each mark, and whether it rests on memory alone: (Mark, bool) -> count."""
        return Counter((d.mark, d.memory_alone) for row in self.rows for d in row.deltas[1:])

    def to_json(self) -> dict:
        """Everything the tables show, as plain data (`compare --json`): columns (each with the basis of its
        figures, and for a replay the torch it followed), rows with their cells and deltas against the baseline
        column (each saying whether its mark rests on memory alone), and per column whether the best setting
        changed; settings and a cell's figures named as every command's --json names them (results/vocabulary.py)."""
        data = json.loads(json.dumps(asdict(self), default=str))
        data["best_changed"] = [self.best_changed(i) for i in range(len(self.columns))]
        for column, c in zip(data["columns"], self.columns):
            column.update({"best": None if c.best is None else setting_name(c.best),
                           BASIS: Basis.of_trials(c.replayed).value})
            if c.replayed:
                column[SIMULATED_TORCH] = simulated_torch(c.torch_version)
        for row, r in zip(data["rows"], self.rows):
            row[SETTING] = setting_name(row[SETTING])
            for delta, d in zip(row["deltas"], r.deltas):
                delta["memory_alone"] = d.memory_alone
        return data


def why_missing(info: SweepInfo, workload: str, conf: str, env_id: str) -> str:
    """Why a setting has no cell in a column of that folder, in words."""
    if workload != info.workload_name:
        return f"no {workload} results here"
    skipped = info.skipped_as(conf, env_id)
    if skipped is not None:
        return f"skipped: {skipped_words(skipped)}"
    return "not run" if conf in {str(c) for c in info.settings} else "not in its grid"


def budget_label(n: int | None, fraction: float | None = None) -> str:
    """A budget in words: 'none', '24.00 GiB', or as a sweep's fraction of the device, with its bytes where known
    ('1 of the device (139.80 GiB)')."""
    if fraction is not None:
        return f"{fraction:g} of the device" + ("" if n is None else f" ({format_bytes(n)})")
    return "none" if n is None else format_bytes(n)


def _failed(c: Cell, was: str = "") -> str:
    return f"{was}{c.failure} in {c.failed} of {c.trials} trials"


def note(row: Row, j: int, columns: list[Column]) -> str:
    """What qualifies column `j`'s mark in `row`, in words ('' where nothing does): its `Why` said from the two
    cells' figures."""
    delta, a, b = row.deltas[j], row.cells[0], row.cells[j]
    budgets = (f"budget differs ({budget_label(delta.budgets[0], columns[0].budget_fraction)} vs "
               f"{budget_label(delta.budgets[1], columns[j].budget_fraction)})" if delta.budgets else "")
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
        return (f"throughput measured differently, not compared: "
                f"{columns[0].label}: {_method(a)}; {columns[j].label}: {_method(b)}")
    return "too few repeats to test throughput" if delta.why is Why.UNTESTED else ""


def _method(c: Cell) -> str:
    """How a cell's throughput was measured: its source, in summary.md's words, and its unit."""
    source = TIME_SOURCES[ThroughputSource(c.source)] if c.source else (
        "its source not recorded (an older record; a workload's then timed the first pass over its measured steps)")
    return f"{source}, in {c.unit or 'units'}/s"
