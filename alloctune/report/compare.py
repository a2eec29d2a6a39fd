"""Results side by side across folders and environments (torch versions, GPUs, interpreters). Reads only.

Grouping is by two explicit key functions: a row is a workload and a setting (`row_key`), a column is one
environment of one results folder (`column_key`). The first column is the baseline; every other cell is judged
against the baseline cell of its row:

  incomparable          a side has no trials (not run, not in its grid, or skipped: the reason from sweep.json),
                        or the workload definition (hash) differs, or both fit under different memory budgets
                        (their peaks answer different questions)
  new failure           fits in the baseline, OOM / crash / time-out in this column
  fixed failure         the reverse;  "fails in both" when neither fits. Also judged across different budgets:
                        "fits in 24 GiB but not in 16 GiB" is what a budget comparison asks
  regression            peak reserved up by more than `factor`, or throughput significantly lower by more than
                        `factor` (one-sided Welch test on log throughput, `stats.compare`)
  improvement           peak reserved down by more than `factor`, or throughput significantly higher by more
                        than `factor`, and no regression
  change within factor  neither, but throughput differs significantly (by less than `factor`)
  no significant change memory within `factor` and throughput within noise (or too few repeats to tell)

`compare_output.py` shows a comparison: the terminal table, compare.md and compare.png.
"""
from __future__ import annotations

import enum
import json
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..decide import stats
from ..decide.device import device_memory, takes_whole_card
from ..errors import ResultsError
from ..results.folder import ResultsFolder, SweepInfo
from ..results.records import SIM_PREFIX, Backend, TrialRecord
from ..settings.conf import canonical, conf_label
from ..units import format_bytes, plural
from .words import skipped_words

DEFAULT_FACTOR = 0.05   # a relative change of memory or throughput beyond this counts as changed


class Mark(str, enum.Enum):
    BASELINE = "baseline"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    WITHIN_FACTOR = "change within factor"
    SAME = "no significant change"
    NEW_FAILURE = "new failure"
    FIXED_FAILURE = "fixed failure"
    BOTH_FAIL = "fails in both"
    INCOMPARABLE = "incomparable"


def row_key(record: TrialRecord) -> tuple[str, str]:
    """A row: workload name and canonical setting."""
    return record.workload, record.conf


def column_key(folder_index: int, record: TrialRecord) -> tuple[int, str, str]:
    """A column: one environment (and backend: a replay never compares with a measurement) of one folder."""
    return folder_index, record.env_id, record.backend


@dataclass(frozen=True)
class Cell:
    """The trials of one setting in one environment."""

    trials: int
    failure: str | None               # the commonest non-OK state when any trial did not end OK, else None
    failed: int                       # how many trials did not end OK
    workload_hash: str
    budget_bytes: int | None
    peak_reserved: float | None       # medians over the OK trials
    ratio: float | None               # peak reserved / peak allocated
    throughput: stats.Summary | None
    samples: tuple[float, ...] = ()   # throughput of each OK trial
    unit: str | None = None
    device_bytes: int | None = None   # the memory of the device it ran on (a replay's: the simulated one's)

    @property
    def fits(self) -> bool:
        return self.failure is None

    @property
    def whole_card(self) -> bool:
        """It fits, but took (nearly) all of the device's memory (decide.device.takes_whole_card)."""
        return self.fits and takes_whole_card(self.peak_reserved, self.device_bytes)


@dataclass(frozen=True)
class Delta:
    """A cell judged against the baseline cell of its row."""

    mark: Mark
    reserved: float | None = None     # peak reserved: this / baseline - 1
    throughput: float | None = None   # throughput median: this / baseline - 1
    p_value: float | None = None      # two-sided Welch test on log throughput
    note: str = ""


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
                                  + [(info.workload_name, canonical(c)) for info in infos for c in info.grid]))
    rows = []
    for workload, conf in row_keys:
        cells = [_cell(groups[key][(workload, conf)]) if (workload, conf) in groups[key] else None for key in keys]
        missing = ["" if cell else _why_missing(infos[key[0]], workload, conf, key[1])
                   for key, cell in zip(keys, cells)]
        row = Row(workload, conf, cells, missing)
        row.deltas = [Delta(Mark.BASELINE)] + [_judge(row, 0, j, columns, factor) for j in range(1, len(keys))]
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
    if choice.conf is None:  # nothing fits: the decision says why
        return Column(**facts, best=None, best_note=choice.decision or "nothing fits")
    return Column(**facts, best=canonical(choice.conf), best_note=choice.decision)


def _cell(records: list[TrialRecord]) -> Cell:
    ms = [r.measurement for r in records if r.state.fits and r.measurement is not None]
    bad = Counter(r.state.value for r in records if not (r.state.fits and r.measurement is not None))
    samples = tuple(m.throughput for m in ms if m.throughput is not None)
    ratios = [m.reserved_ratio for m in ms if m.reserved_ratio is not None]
    return Cell(
        trials=len(records),
        failure=bad.most_common(1)[0][0] if bad else None,
        failed=sum(bad.values()),
        workload_hash=records[0].workload_hash,
        budget_bytes=records[0].budget_bytes,
        peak_reserved=statistics.median(m.peak_reserved_bytes for m in ms) if ms else None,
        ratio=statistics.median(ratios) if ratios else None,
        throughput=stats.summarize(list(samples)) if samples else None,
        samples=samples,
        unit=next((m.unit for m in ms if m.unit), None),
        device_bytes=device_memory(records),
    )


def _why_missing(info: SweepInfo, workload: str, conf: str, env_id: str) -> str:
    if workload != info.workload_name:
        return f"no {workload} results here"
    skipped = info.skipped_as(conf, env_id)
    if skipped is not None:
        return f"skipped: {skipped_words(skipped)}"
    return "not run" if conf in {canonical(c) for c in info.grid} else "not in its grid"


def budget_label(n: int | None) -> str:
    return "none" if n is None else format_bytes(n)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _judge(row: Row, i: int, j: int, columns: list[Column], factor: float) -> Delta:
    a, b = row.cells[i], row.cells[j]
    if a is None or b is None:
        side = columns[i] if a is None else columns[j]
        why = row.missing[i] if a is None else row.missing[j]
        return Delta(Mark.INCOMPARABLE, note=f"{why} in {side.label}")
    if a.workload_hash != b.workload_hash:
        return Delta(Mark.INCOMPARABLE, note=f"workload definition differs ({a.workload_hash[:12]} vs "
                                             f"{b.workload_hash[:12]})")
    budgets = "" if a.budget_bytes == b.budget_bytes else \
        f"budget differs ({budget_label(a.budget_bytes)} vs {budget_label(b.budget_bytes)})"
    if not a.fits and not b.fits:
        return Delta(Mark.BOTH_FAIL, note=_join(f"{a.failure} / {b.failure}", budgets))
    if not b.fits:
        return Delta(Mark.NEW_FAILURE, note=_join(f"{b.failure} in {b.failed} of {b.trials} trials", budgets))
    if not a.fits:
        return Delta(Mark.FIXED_FAILURE, note=_join(f"was {a.failure} in {a.failed} of {a.trials} trials", budgets))
    if budgets:
        return Delta(Mark.INCOMPARABLE, note=f"{budgets}; both fit, and peaks under different limits do not compare")
    reserved = b.peak_reserved / a.peak_reserved - 1 if a.peak_reserved and b.peak_reserved is not None else None
    slower = faster = significant = False
    throughput = p_value = None
    if a.samples and b.samples:
        test = stats.compare(list(a.samples), list(b.samples), tolerance=factor)
        # The same one-sided test with the sides swapped: is the baseline slower than (1 - factor) x this one?
        faster = stats.compare(list(b.samples), list(a.samples), tolerance=factor).slower_beyond_tolerance
        slower, significant = test.slower_beyond_tolerance, test.significant
        throughput, p_value = test.ratio - 1, test.p_value
    note = "" if p_value is not None or throughput is None else "too few repeats to test throughput"
    if (reserved or 0) > factor or slower:
        mark = Mark.REGRESSION
    elif (reserved or 0) < -factor or faster:
        mark = Mark.IMPROVEMENT
    elif significant:
        mark = Mark.WITHIN_FACTOR
    else:
        mark = Mark.SAME
    return Delta(mark, reserved, throughput, p_value, note)
