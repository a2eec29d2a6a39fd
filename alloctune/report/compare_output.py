"""A comparison (`compare.py`) shown: the terminal table, compare.md and compare.png. The table cells, the legend of
the marks and the allocator changes between the torches compared are built once (`cell_lines`, `legend`,
`allocator_changes`) for the terminal and for Markdown."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ..decide import stats
from ..decide.regression import Mark
from ..errors import printable
from ..files import write_file
from ..results.vocabulary import signed_percent
from ..settings.conf import conf_label
from ..settings.versions import changes_between, parse_version
from ..sim.target import simulated_torch
from ..units import figure, format_bytes
from .compare import Column, Comparison, Row
from .layout import INDENT, say
from .tables import add_setting_column, markdown_table, measured, print_table
from .words import format_rate

if TYPE_CHECKING:
    from rich.table import Table

# Terminal colour and plot symbol per mark. A mark judges (less memory and more throughput are both better), so its
# symbol says better or worse, never a direction: an arrow down would say "less" of a throughput that rose.
STYLE = {
    Mark.BASELINE: ("", ""), Mark.REGRESSION: ("bold red", "−"), Mark.IMPROVEMENT: ("bold green", "+"),
    Mark.WITHIN_FACTOR: ("yellow", "~"), Mark.SAME: ("dim", "="), Mark.NEW_FAILURE: ("bold red", "✗"),
    Mark.FIXED_FAILURE: ("bold green", "✓"), Mark.BOTH_FAIL: ("red", "✗✗"), Mark.INCOMPARABLE: ("magenta", "?"),
}
# What each mark says, for the legend (decide/regression.py has the rules); and, where it rests on memory alone
# (`Delta.memory_alone`: throughput not compared on both sides), what it says then.
MEANING = {
    Mark.REGRESSION: "more memory, or less throughput, beyond the factor",
    Mark.IMPROVEMENT: "less memory, or more throughput, beyond the factor, and no regression",
    Mark.WITHIN_FACTOR: "throughput differs significantly, by less than the factor",
    Mark.SAME: "memory within the factor, throughput within noise",
    Mark.NEW_FAILURE: "fits in the baseline, not here", Mark.FIXED_FAILURE: "fits here, not in the baseline",
    Mark.BOTH_FAIL: "fits in neither", Mark.INCOMPARABLE: "a side missing, or another workload or budget",
}
NOT_COMPARED = "throughput not compared: a side has none, or measured it differently"
MEMORY_ALONE = {
    Mark.REGRESSION: f"more memory beyond the factor; {NOT_COMPARED}",
    Mark.IMPROVEMENT: f"less memory beyond the factor; {NOT_COMPARED}",
    Mark.SAME: f"memory within the factor; {NOT_COMPARED}",
}
ON_MEMORY_ALONE = ", on memory alone"


def _pct(x: float | None) -> str:
    return "-" if x is None else signed_percent(x)


def _rate(throughput: stats.Summary, unit: str | None) -> str:
    return format_rate(throughput.median, unit)


def cell_lines(row: Row, j: int, note: Callable[[str], str] = str) -> list[str]:
    """What a table shows for column `j` of `row`: figures, then (for non-baseline columns) deltas and mark.
    `note(text)` gives what a cell shows of a reason (missing, or a note on the delta): the text itself in
    compare.md, a reference to a note below the table on the terminal."""
    cell, delta = row.cells[j], row.deltas[j]
    if cell is None:
        lines = [note(row.missing[j])]
    elif cell.failure is not None:  # not cell.fits
        lines = [f"{cell.failure.upper()} ({cell.failed}/{cell.trials})"]
    else:
        ratio = "-" if cell.reserved_ratio is None else f"×{figure(cell.reserved_ratio, '.2f')}"
        # A replay measures no throughput: its cells show memory only.
        lines = [f"{format_bytes(cell.peak_reserved_bytes)} {ratio}"] + (
            [_rate(cell.throughput, cell.unit)] if cell.throughput else [])
        if cell.whole_card:
            lines.append("whole card")
    if j and delta.mark is not Mark.INCOMPARABLE and (delta.reserved is not None or delta.throughput is not None):
        lines.append(", ".join([f"mem {_pct(delta.reserved)}"]
                               + ([f"tput {_pct(delta.throughput)}"] if delta.throughput is not None else [])))
    if j:
        lines.append(_mark(delta.mark, delta.memory_alone))
        if row.notes[j] and cell is not None and row.cells[0] is not None:  # else the baseline cell says why
            lines.append(note(row.notes[j]))
    return lines


def _mark(mark: Mark, memory_alone: bool = False) -> str:
    """A mark as a cell and the legend show it: its symbol, its name, and whether it rests on memory alone."""
    return f"{STYLE[mark][1]} {mark.value}{ON_MEMORY_ALONE if memory_alone else ''}".strip()


def _header(column: Column) -> str:
    """Its label, what its figures rest on (a replay: the torch it followed, once; the trace's where another),
    and its budget."""
    lines = [column.label, column.basis]
    if column.trace_torch and simulated_torch(column.trace_torch) != simulated_torch(column.torch_version):
        lines.append(f"trace from torch {column.trace_torch}")
    if column.budget_bytes is not None or column.budget_fraction is not None:
        lines.append(f"budget {column.budget}")
    return "\n".join(lines)


def _best_text(comparison: Comparison, j: int, name: Callable[[str], str] | None = None,
               note: Callable[[str], str] = str) -> str:
    """Column `j`'s best setting (`name(conf)` shows it, default: by its label), and whether it changed."""
    column = comparison.columns[j]
    if column.best is None:
        return note(column.best_note)
    text = name(column.best) if name else conf_label(column.best)
    changed = comparison.best_changed(j)
    if j and changed is not None:
        text += " (changed)" if changed else " (same)"
    return text


INLINE_NOTE = 16   # a reason this short stays in its cell on the terminal; a longer one is a note below the table


class _Notes:
    """Reasons too long for a cell, numbered in the order they are met; the same reason keeps its number."""

    def __init__(self) -> None:
        self.numbered: dict[str, int] = {}

    def __call__(self, text: str) -> str:
        if len(text) <= INLINE_NOTE:
            return text
        number = self.numbered.setdefault(text, len(self.numbered) + 1)
        head, colon, _ = text.partition(": ")   # 'skipped: torch ... rejects it' -> 'skipped [1]'
        return f"{head} [{number}]" if colon and len(head) <= INLINE_NOTE else f"[{number}]"

    def lines(self) -> list[str]:
        return [f"[{n}] {text}" for text, n in self.numbered.items()]


def render_table(comparison: Comparison, width: int = 100) -> tuple[Table, list[str], list[str]]:
    """The terminal table in `width` columns, no cell broken inside a word: one row per workload and setting, one
    column per environment, plus the best setting; and the lines to print above it (what each lettered column
    stands for) and below it (the settings where the table numbers them, the notes its cells refer to). Tried in
    turn until one fits: as it is; settings numbered (a workload with them); and columns lettered."""
    from rich.table import Table
    from rich.text import Text

    rows, cols = comparison.rows, comparison.columns
    one = len({row.workload for row in rows}) == 1   # one workload: named in the title, not in a column
    notes = _Notes()
    cells = [[cell_lines(row, j, notes) for j in range(len(cols))] for row in rows]
    title = (f"alloctune compare{' ' + rows[0].workload if one else ''} (factor {comparison.factor:.0%}; peak "
             f"reserved ×reserved/allocated, throughput median)")

    def number(j: int, conf: str) -> str:
        """The best setting of column j as the number of its row."""
        n = next((i for i, row in enumerate(rows, 1) if row.conf == conf and row.cells[j] is not None), None)
        return f"({n})" if n else conf_label(conf)

    def table_of(numbered: bool, lettered: bool) -> Table:
        table = Table(title=title, show_lines=True)
        if not (one or numbered):
            table.add_column("workload", min_width=_longest_word(row.workload for row in rows))
        names = [f"({n})" for n in range(1, len(rows) + 1)] + ["best"] if numbered else \
            [row.label for row in rows] + ["best setting"]
        add_setting_column(table, names)
        best = [_best_text(comparison, j, functools.partial(number, j) if numbered else None, notes)
                for j in range(len(cols))]
        for j, column in enumerate(cols):
            header = _letter(j) if lettered else _header(column)
            texts = [header, best[j], *("\n".join(c[j]) for c in cells)]
            table.add_column(header, overflow="fold", min_width=_longest_word(texts))
        for row, name, row_cells in zip(rows, names, cells):
            styled = [Text("\n".join(lines), style=STYLE[row.deltas[j].mark][0] if j else "")
                      for j, lines in enumerate(row_cells)]
            table.add_row(*([] if one or numbered else [row.workload]), name, *styled)
        table.add_row(*([] if one or numbered else [""]), Text(names[-1], style="bold"),
                      *[Text(b, style="bold") for b in best])
        return table

    for numbered, lettered in ((False, False), (True, False), (True, True)):
        table = table_of(numbered, lettered)
        if _narrowest(table) <= width:
            break
    above = [f"{_letter(j)}: " + ", ".join(_header(c).split("\n")) for j, c in enumerate(cols)] if lettered else []
    below = [f"({n}) {row.label if one else f'{row.workload} · {row.label}'}" for n, row in enumerate(rows, 1)] \
        if numbered else []
    return table, above, below + notes.lines()


def _letter(j: int) -> str:
    return chr(ord("A") + j) if j < 26 else f"A{j}"


def _longest_word(texts: Iterable[str]) -> int:
    return max((len(word) for text in texts for word in text.split()), default=1)


def _narrowest(table) -> int:
    """The fewest columns `table` takes with no word broken (each column's min_width is its longest word)."""
    return measured(table).minimum


def print_comparison(comparison: Comparison, console) -> None:
    """The table, what its numbers and notes stand for, the legend of the marks it shows, and the allocator
    changes between the torch versions compared (`legend`, `allocator_changes`: as compare.md says them)."""
    from rich.text import Text

    table, above, below = render_table(comparison, console.width)
    for line in above:
        say(console, Text(INDENT + line), rest=INDENT * 3)
    print_table(console, table)
    for line in below:
        say(console, Text(INDENT + line), rest=INDENT * 3)
    sections = [("Marks", legend(comparison, every=False)), *allocator_changes(comparison.columns)]
    for title, items in sections:
        say(console, Text(f"{title}:", style="bold"))
        for item in items:
            say(console, Text(INDENT + item), rest=INDENT * 3)


def legend(comparison: Comparison, every: bool = True) -> list[str]:
    """Each mark, what it says and how many cells have it (`every`: also those none has); a mark that rests on
    memory alone in some cells has a line of its own for them, saying so."""
    counts = comparison.marks()
    lines = []
    for mark in Mark:
        if mark is Mark.BASELINE:
            continue
        if every or counts[mark, False]:
            lines.append(f"{_mark(mark)} ({MEANING[mark]}): {counts[mark, False]}")
        if counts[mark, True]:
            lines.append(f"{_mark(mark, True)} ({MEMORY_ALONE[mark]}): {counts[mark, True]}")
    return lines


def allocator_changes(cols: list[Column]) -> list[tuple[str, list[str]]]:
    """The allocator changes (versions.BEHAVIOUR_CHANGES) between the baseline's torch and each other column's:
    (title, one line per change)."""
    sections = []
    base = cols[0].torch_version
    for version in dict.fromkeys(c.torch_version for c in cols[1:]):
        if not (base and version) or parse_version(base) == parse_version(version):
            continue
        changes = [f"{ver}: {text}" for ver, text in changes_between(base, version)]
        sections.append((f"Allocator changes between torch {base} and {version}",
                         changes or ["none that alloctune knows of"]))
    return sections


def write_compare_md(comparison: Comparison, path: str | Path) -> Path:
    """compare.md: environments, the table, the best setting per environment, and the counts of each mark."""
    path = Path(path)
    cols = comparison.columns
    environments = [[c.label, str(c.folder), c.env_id, c.backend, c.torch_version or "-", c.trace_torch or "-",
                     c.budget, _best_text(comparison, j)] for j, c in enumerate(cols)]
    settings = [[row.workload, f"`{row.label}`", *("<br>".join(cell_lines(row, j)) for j in range(len(cols)))]
                for row in comparison.rows]
    out = ["# alloctune compare\n",
           f"Baseline: **{cols[0].label}**. Every other column is judged against it; factor "
           f"{comparison.factor:.0%} (see the marks below).\n",
           "## Environments\n",
           markdown_table(("column", "folder", "env_id", "backend", "torch", "trace recorded with", "budget",
                           "best setting"), environments),
           "", "## Settings\n",
           "Cells: peak reserved ×(reserved ÷ allocated), throughput median; then the change against the baseline "
           "and the mark.\n",
           markdown_table(["workload", "setting", *(c.label for c in cols)], settings),
           "", "## Best setting per environment\n"]
    for j, c in enumerate(cols):
        out.append(f"- **{_md(c.label)}**: `{conf_label(c.best)}`" + (f" ({_md(c.best_note)})" if c.best_note else "")
                   if c.best is not None else f"- **{_md(c.label)}**: {c.best_note}")
        if j and comparison.best_changed(j):
            out[-1] += f" — changed from `{conf_label(cols[0].best)}`"
    for title, items in allocator_changes(cols):
        out += ["", f"## {title}\n"] + [f"- {_md(item)}" for item in items]
    out += ["", "## Marks\n"] + [f"- {line}" for line in legend(comparison)]
    write_file(path, printable("\n".join(out) + "\n"))   # a GPU's name or a path may hold controls
    return path


def _md(text: str) -> str:
    return text.replace("|", "\\|")


_PLOT_COLOURS = {Mark.REGRESSION: "red", Mark.NEW_FAILURE: "red", Mark.BOTH_FAIL: "darkred",
                 Mark.IMPROVEMENT: "green", Mark.FIXED_FAILURE: "green", Mark.INCOMPARABLE: "purple",
                 Mark.WITHIN_FACTOR: "goldenrod", Mark.SAME: "grey", Mark.BASELINE: "black"}


def plot_comparison(comparison: Comparison, path: str | Path) -> Path:
    """compare.png (`comparison_figure`)."""
    from .plot import plain_text

    path = Path(path)
    with plain_text():   # a folder's name is a column's label
        figure = comparison_figure(comparison)
        write_file(path, lambda f: figure.savefig(f, format="png", dpi=120))
    return path


def comparison_figure(comparison: Comparison):
    """Grouped bars: peak reserved per setting (x) per environment (bar), each labelled with its figure and, beside
    the baseline, its mark; a setting not run or failed as its state in words where its bar would stand; hatched
    where it took (nearly) the whole card; lines for the columns' budgets and device memory; the legend outside.
    Drawn on a bare Figure (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from ..units import GiB
    from .plot import BUDGET_STYLE, DEVICE_STYLE, WHOLE_CARD, limit_lines

    rows, cols = comparison.rows, comparison.columns
    width = 0.8 / len(cols)
    top = max((c.peak_reserved_bytes for r in rows for c in r.cells if c and c.peak_reserved_bytes), default=GiB) / GiB
    fig = Figure(figsize=(min(30, max(8, 0.5 * len(rows) * len(cols) + 4)), 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for j, column in enumerate(cols):
        xs = [i + (j - (len(cols) - 1) / 2) * width for i in range(len(rows))]
        heights = [(c.peak_reserved_bytes or 0) / GiB if c and c.fits else 0 for c in (r.cells[j] for r in rows)]
        bars = ax.bar(xs, heights, width, label=f"{column.label}\n{column.basis}")
        for x, row, bar in zip(xs, rows, bars):
            cell, mark = row.cells[j], row.deltas[j].mark
            symbol = f" {STYLE[mark][1]}" if j else ""
            if cell is None or not cell.fits:
                # Text only, in the bar's colour: a drawn stub would read as a small bar (a small peak).
                ax.text(x, top * 0.01, ("n/a" if cell is None else (cell.failure or "failed")) + symbol,
                        ha="center", va="bottom", rotation=90, fontsize=7, fontstyle="italic",
                        color=_PLOT_COLOURS[mark] if j else bar.get_facecolor())
                continue
            if cell.whole_card:
                bar.set_hatch("//")
                bar.set_edgecolor(WHOLE_CARD["color"])
            ax.annotate(f"{bar.get_height():.1f}{symbol}", (x, bar.get_height()), textcoords="offset points",
                        xytext=(0, 2), ha="center", va="bottom", rotation=90, fontsize=7,
                        color=_PLOT_COLOURS[mark] if j else "black")
    limits = [(b, f"budget ({c.label})" if len({x.budget_bytes for x in cols}) > 1 else "budget", BUDGET_STYLE)
              for b, c in {c.budget_bytes: c for c in cols if c.budget_bytes}.items()]
    devices = {cell.device_bytes: column for row in rows for cell, column in zip(row.cells, cols)
               if cell is not None and cell.device_bytes}
    limits += [(d, f"device memory ({c.label})" if len(devices) > 1 else "device memory", DEVICE_STYLE)
               for d, c in devices.items()]
    extent = limit_lines(ax, limits, top, ax.axhline)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r.label}" if len({x.workload for x in rows}) == 1 else f"{r.workload}\n{r.label}"
                        for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("peak reserved (GiB)")
    ax.set_ylim(0, extent * 1.3)   # room for the rotated labels above the bars
    marks = " ".join(f"{STYLE[m][1]} {m.value}" for m in Mark if m is not Mark.BASELINE)
    ax.set_title(f"peak reserved per setting and environment (vs {cols[0].label})\n{marks}", fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    if any(c is not None and c.whole_card for r in rows for c in r.cells):
        handles.append(Patch(facecolor="white", edgecolor=WHOLE_CARD["color"], hatch="//"))
        labels.append(WHOLE_CARD["label"])
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    return fig
