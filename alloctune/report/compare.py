"""Results side by side across folders and environments (torch versions, GPUs, interpreters). Reads only.

Grouping is by two explicit key functions: a row is a workload and a setting (`row_key`), a column is one
environment of one results folder (`column_key`). The first column is the baseline; every other cell is judged
against the baseline cell of its row by `decide/regression.judge` (its marks are listed there), and what
qualifies a mark is said here in words (`note`), once, from its code and the cells' figures.

`compare_output.py` shows a comparison: the terminal table, compare.md and compare.png.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..decide.regression import DEFAULT_FACTOR, Cell, Delta, Mark, Why, cell_of, judge
from ..errors import ResultsError
from ..results.folder import ResultsFolder, SweepInfo
from ..results.records import SIM_PREFIX, Backend, ThroughputSource, TrialRecord
from ..settings.conf import conf_label
from ..units import format_bytes, plural
from .words import TIME_SOURCES, skipped_words

def row_key(record: TrialRecord) -> tuple[str, str]:
    """A row: workload name and canonical setting."""
    return record.workload, record.conf


def column_key(folder_index: int, record: TrialRecord) -> tuple[int, str, str]:
    """A column: one environment (and backend: a replay never compares with a measurement) of one folder."""
    return folder_index, record.env_id, record.backend


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
        """Everything the tables show, as plain data (`compare --json`): columns, rows with their cells and
        deltas against the baseline column, and per column whether the best setting changed."""
        data = json.loads(json.dumps(asdict(self), default=str))
        data["best_changed"] = [self.best_changed(i) for i in range(len(self.columns))]
        return data


def compare(folders: list[ResultsFolder], factor: float = DEFAULT_FACTOR) -> Comparison:
    """Every (workload, setting) row across every environment column of `folders`, judged against column 0."""
    if not 0 < factor < 1:
        raise ValueError(f"factor must be in (0, 1), got {factor!r}")
    infos = [f.info() for f in folders]
    groups: dict[tuple, dict[tuple, list[TrialRecord]]] = {}
    for index, folder in enumerate(folders):
        for record in folder.trials():
            groups.setdefault(column_key(index, record), {}).setdefault(row_key(record), []).append(record)
    if len(groups) < 2:
        raise ResultsError(f"nothing to compare: {', '.join(str(f.path) for f in folders)} hold "
                           f"{plural(len(groups), 'environment')} with trials; compare needs at least two")
    keys = list(groups)
    labels = _labels(keys, folders)
    columns = [_column(key, label, folders[key[0]], infos[key[0]], groups[key]) for key, label in zip(keys, labels)]
    # Settings of a grid that ran nowhere (e.g. skipped in every environment) still get a row saying why.
    row_keys = list(dict.fromkeys([rk for key in keys for rk in groups[key]]
                                  + [(info.workload_name, str(c)) for info in infos for c in info.settings]))
    rows = []
    for workload, conf in row_keys:
        cells = [cell_of(groups[key][(workload, conf)]) if (workload, conf) in groups[key] else None for key in keys]
        missing = ["" if cell else _why_missing(infos[key[0]], workload, conf, key[1])
                   for key, cell in zip(keys, cells)]
        row = Row(workload, conf, cells, missing)
        row.deltas = [Delta(Mark.BASELINE)] + [judge(cells[0], cells[j], factor) for j in range(1, len(keys))]
        row.notes = [note(row, j, columns) for j in range(len(keys))]
        rows.append(row)
    return Comparison(columns, rows, factor)


def _labels(keys: list[tuple], folders: list[ResultsFolder]) -> list[str]:
    """The env_id; the folder's name instead where two columns share an env_id (the same torch swept twice)."""
    plain = [env + (" (sim)" if backend == Backend.SIM and not env.startswith(SIM_PREFIX) else "") for _, env, backend in keys]
    per_folder = Counter(index for index, _, _ in keys)
    labels = []
    for (index, env, _), label in zip(keys, plain):
        if plain.count(label) > 1:
            name = folders[index].path.name
            label = f"{name}:{label}" if per_folder[index] > 1 else name
        labels.append(label)
    return [f"{i + 1}:{label}" if labels.count(label) > 1 else label for i, label in enumerate(labels)]


def _first(records: list[TrialRecord], name: str) -> str | None:
    return next((r.env[name] for r in records if r.env.get(name)), None)


def _column(key, label: str, folder: ResultsFolder, info: SweepInfo, rows: dict) -> Column:
    _, env_id, backend = key
    records = [r for rs in rows.values() for r in rs]
    # A replay's env describes the recording (its 'torch' is the trace's); 'simulated_as' names the torch whose
    # allocator the simulator followed, which is what this column stands for.
    simulated_as = _first(records, "simulated_as")
    torch_version = simulated_as or (info.envs.get(env_id) or {}).get("torch") or _first(records, "torch")
    facts = dict(key=key, label=label, folder=folder.path, env_id=env_id, backend=backend,
                 torch_version=torch_version, trace_torch=_first(records, "trace_torch") if simulated_as else None,
                 budget_bytes=records[0].budget_bytes)
    if not folder.has_choice():
        return Column(**facts, best=None, best_note="no choice: sweep not finished")
    choices = folder.choices()  # damage in it is an error, not an unfinished sweep
    match = [c for c in choices if c.env_id == env_id and c.backend == backend]
    if not match:
        return Column(**facts, best=None, best_note="no choice for this environment")
    choice = match[0]
    if choice.setting is None:  # nothing fits: the decision says why
        return Column(**facts, best=None, best_note=choice.decision or "nothing fits")
    return Column(**facts, best=str(choice.setting), best_note=choice.decision)


def _why_missing(info: SweepInfo, workload: str, conf: str, env_id: str) -> str:
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
