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
"""
from __future__ import annotations

import enum
import json
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..decide import stats
from ..errors import ResultsError
from ..files import write_file
from ..results.folder import ResultsFolder, SweepInfo
from ..results.records import SIM_PREFIX, Backend, TrialRecord
from ..settings.conf import canonical
from ..settings.versions import changes_between, parse_version
from ..units import format_bytes


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


# Terminal colour and plot symbol per mark.
STYLE = {
    Mark.BASELINE: ("", ""), Mark.REGRESSION: ("bold red", "▲"), Mark.IMPROVEMENT: ("bold green", "▼"),
    Mark.WITHIN_FACTOR: ("yellow", "~"), Mark.SAME: ("dim", "="), Mark.NEW_FAILURE: ("bold red", "✗"),
    Mark.FIXED_FAILURE: ("bold green", "✓"), Mark.BOTH_FAIL: ("red", "✗✗"), Mark.INCOMPARABLE: ("magenta", "?"),
}


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

    @property
    def fits(self) -> bool:
        return self.failure is None


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
        return self.conf or "default"


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


def compare(folders: list[ResultsFolder], factor: float = 0.05) -> Comparison:
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
                           f"{len(groups)} environment(s) with trials; compare needs at least two")
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
    )


def _why_missing(info: SweepInfo, workload: str, conf: str, env_id: str) -> str:
    if workload != info.workload_name:
        return f"no {workload} results here"
    reason = info.skip_reason(conf, env_id)
    if reason:
        return f"skipped: {reason}"
    return "not run" if conf in {canonical(c) for c in info.grid} else "not in its grid"


def _budget(n: int | None) -> str:
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
        f"budget differs ({_budget(a.budget_bytes)} vs {_budget(b.budget_bytes)})"
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


# ---- output: terminal table, markdown, plot ------------------------------------------------------------------

def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _rate(throughput: stats.Summary, unit: str | None) -> str:
    return f"{throughput.median:,.0f} {unit or 'units'}/s"


def cell_lines(row: Row, j: int) -> list[str]:
    """What a table shows for column `j` of `row`: figures, then (for non-baseline columns) deltas and mark."""
    cell, delta = row.cells[j], row.deltas[j]
    if cell is None:
        lines = [row.missing[j]]
    elif cell.failure is not None:  # not cell.fits
        lines = [f"{cell.failure.upper()} ({cell.failed}/{cell.trials})"]
    else:
        ratio = "-" if cell.ratio is None else f"×{cell.ratio:.2f}"
        # A replay measures no throughput: its cells show memory only.
        lines = [f"{format_bytes(cell.peak_reserved)} {ratio}"] + ([_rate(cell.throughput, cell.unit)] if cell.throughput else [])
    if j and delta.mark is not Mark.INCOMPARABLE and (delta.reserved is not None or delta.throughput is not None):
        lines.append(", ".join([f"mem {_pct(delta.reserved)}"]
                               + ([f"tput {_pct(delta.throughput)}"] if delta.throughput is not None else [])))
    if j:
        lines.append(f"{STYLE[delta.mark][1]} {delta.mark.value}".strip())
        if delta.note and cell is not None and row.cells[0] is not None:  # else the baseline cell says why
            lines.append(delta.note)
    return lines


def _header(column: Column) -> str:
    lines = [column.label]
    if column.torch_version:
        lines.append(f"torch {column.torch_version}" + (" (simulated)" if column.trace_torch else ""))
    if column.trace_torch:
        lines.append(f"trace from torch {column.trace_torch}")
    if column.budget_bytes is not None:
        lines.append(f"budget {format_bytes(column.budget_bytes)}")
    return "\n".join(lines)


def _best_text(comparison: Comparison, j: int) -> str:
    column = comparison.columns[j]
    if column.best is None:
        return column.best_note
    text = column.best or "default"
    changed = comparison.best_changed(j)
    if j and changed is not None:
        text += " (changed)" if changed else " (same)"
    return text


def render_table(comparison: Comparison):
    """A rich Table: one row per workload and setting, one column per environment, plus the best setting."""
    from rich.table import Table
    from rich.text import Text

    from .tables import add_setting_column

    # One workload: named in the title, not repeated in a column (the table must fit 100 columns).
    workloads = sorted({row.workload for row in comparison.rows})
    one = len(workloads) == 1
    table = Table(title=f"alloctune compare{' ' + workloads[0] if one else ''} (factor {comparison.factor:.0%}; "
                        f"peak reserved ×reserved/allocated, throughput median)", show_lines=True)
    if not one:
        table.add_column("workload", overflow="fold")
    add_setting_column(table, [row.label for row in comparison.rows] + ["best setting"])
    for column in comparison.columns:
        table.add_column(_header(column), overflow="fold")
    for row in comparison.rows:
        cells = []
        for j in range(len(comparison.columns)):
            text = Text("\n".join(cell_lines(row, j)))
            if j:
                text.stylize(STYLE[row.deltas[j].mark][0])
            cells.append(text)
        table.add_row(*([] if one else [row.workload]), row.label, *cells)
    table.add_row(*([] if one else [""]), Text("best setting", style="bold"),
                  *[Text(_best_text(comparison, j), style="bold") for j in range(len(comparison.columns))])
    return table


def print_comparison(comparison: Comparison, console=None) -> None:
    from rich.console import Console

    (console or Console()).print(render_table(comparison))


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def write_compare_md(comparison: Comparison, path: str | Path) -> Path:
    """compare.md: environments, the table, the best setting per environment, and the counts of each mark."""
    path = Path(path)
    cols = comparison.columns
    out = ["# alloctune compare\n",
           f"Baseline: **{cols[0].label}**. Every other column is judged against it; factor "
           f"{comparison.factor:.0%} (see the marks below).\n",
           "## Environments\n",
           "| column | folder | env_id | backend | torch | trace recorded with | budget | best setting |",
           "|---|---|---|---|---|---|---|---|"]
    out += [f"| {_md(c.label)} | {_md(str(c.folder))} | {_md(c.env_id)} | {c.backend} | {c.torch_version or '-'} | "
            f"{c.trace_torch or '-'} | {_budget(c.budget_bytes)} | {_md(_best_text(comparison, j))} |"
            for j, c in enumerate(cols)]
    out += ["", "## Settings\n",
            "Cells: peak reserved ×(reserved ÷ allocated), throughput median; then the change against the baseline "
            "and the mark.\n",
            "| workload | setting | " + " | ".join(_md(c.label) for c in cols) + " |",
            "|---|---|" + "---|" * len(cols)]
    for row in comparison.rows:
        cells = ["<br>".join(_md(x) for x in cell_lines(row, j)) for j in range(len(cols))]
        out.append(f"| {_md(row.workload)} | `{row.label}` | " + " | ".join(cells) + " |")
    out += ["", "## Best setting per environment\n"]
    for j, c in enumerate(cols):
        out.append(f"- **{_md(c.label)}**: `{c.best or 'default'}`" + (f" ({_md(c.best_note)})" if c.best_note else "")
                   if c.best is not None else f"- **{_md(c.label)}**: {c.best_note}")
        if j and comparison.best_changed(j):
            out[-1] += f" — changed from `{cols[0].best or 'default'}`"
    out += _changes_md(cols)
    counts = comparison.marks()
    out += ["", "## Marks\n"] + [f"- {STYLE[m][1]} {m.value}: {counts.get(m, 0)}" for m in Mark if m is not Mark.BASELINE]
    write_file(path, "\n".join(out) + "\n")
    return path


def _changes_md(cols: list[Column]) -> list[str]:
    """The allocator changes (versions.BEHAVIOUR_CHANGES) between the baseline's torch and each other column's."""
    out = []
    base = cols[0].torch_version
    for version in dict.fromkeys(c.torch_version for c in cols[1:]):
        if not (base and version) or parse_version(base) == parse_version(version):
            continue
        changes = changes_between(base, version)
        out += ["", f"## Allocator changes between torch {base} and {version}\n"]
        out += [f"- {ver}: {_md(text)}" for ver, text in changes] or ["- none that alloctune knows of"]
    return out


_PLOT_COLOURS = {Mark.REGRESSION: "red", Mark.NEW_FAILURE: "red", Mark.BOTH_FAIL: "darkred",
                 Mark.IMPROVEMENT: "green", Mark.FIXED_FAILURE: "green", Mark.INCOMPARABLE: "purple",
                 Mark.WITHIN_FACTOR: "goldenrod", Mark.SAME: "grey", Mark.BASELINE: "black"}


def plot_comparison(comparison: Comparison, path: str | Path) -> Path:
    """Grouped bars: peak reserved per setting (x) per environment (bar); the mark above each non-baseline bar,
    a setting not run or failed as its state in words where its bar would stand."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    rows, cols = comparison.rows, comparison.columns
    width = 0.8 / len(cols)
    top = max((c.peak_reserved for r in rows for c in r.cells if c and c.peak_reserved), default=1) / 2**30
    fig, ax = plt.subplots(figsize=(min(30, max(6, 0.5 * len(rows) * len(cols) + 2)), 5))
    for j, column in enumerate(cols):
        xs = [i + (j - (len(cols) - 1) / 2) * width for i in range(len(rows))]
        heights = [(c.peak_reserved or 0) / 2**30 if c and c.fits else 0 for c in (r.cells[j] for r in rows)]
        bars = ax.bar(xs, heights, width, label=column.label)
        for x, row, bar in zip(xs, rows, bars):
            cell, mark = row.cells[j], row.deltas[j].mark
            if cell is None or not cell.fits:
                # Text only, in the bar's colour: a drawn stub would read as a small bar (a small peak).
                ax.text(x, top * 0.01, "n/a" if cell is None else (cell.failure or "failed"), ha="center",
                        va="bottom", rotation=90, fontsize=7, fontstyle="italic", color=bar.get_facecolor())
            if j:  # above the bar, or above a failure's rotated label
                y = top * 0.2 if cell is None or not cell.fits else bar.get_height() + top * 0.01
                ax.text(x, y, STYLE[mark][1], ha="center", va="bottom", color=_PLOT_COLOURS[mark], fontsize=10)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r.label}" if len({x.workload for x in rows}) == 1 else f"{r.workload}\n{r.label}"
                        for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("peak reserved (GiB)")
    ax.set_ylim(0, top * 1.25)
    legend = " ".join(f"{STYLE[m][1]} {m.value}" for m in Mark if m is not Mark.BASELINE)
    ax.set_title(f"peak reserved per setting and environment (vs {cols[0].label})\n{legend}", fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return path
