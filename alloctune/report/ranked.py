"""The ranked table of one choice's group, from the same rows for the terminal (within the console's width:
`ranked_table`, `print_choice`, with what the table leaves unsaid printed under it) and for summary.md
(`markdown_ranked`): the decision's record (`results/choices.ChoiceRecord`), its settings' figures in the order it
ranks them."""
from __future__ import annotations

import math

from rich import box
from rich.table import Table
from rich.text import Text

from ..decide.reasons import Code
from ..results.choices import ChoiceRecord, how_far
from ..results.figures import MemoryMeasure, SettingFigures
from ..results.names import BEST_FILE
from ..results.vocabulary import times
from ..units import figure, format_bytes, format_number, plural
from .layout import INDENT, say
from .provenance import figures_kind
from .predicted import (PREDICTED_HEADER, PREDICTED_LEGEND, calls_cell, confirmed_pair, pair_cell, pair_legend,
                        predicted_cell, prediction)
from .tables import add_setting_column, keep_columns, markdown_table, most_that_fit, print_numbered
from .words import format_rate

COLUMNS = ("setting", "state", "peak reserved", "peak allocated", "reserved/allocated", "fragmentation", "retries",
           "throughput median [95% CI]", "vs default", "driver calls/step (replayed)", "predicted slowdown", "flags")


def _spread(spread: float | None) -> str:
    return f"+{math.inf if spread is None else spread:.1%}"   # None: it was not finite


def _flags(s: SettingFigures) -> str:
    flags = []
    if s.unstable:
        flags.append(f"memory disagreed across repeats ({_spread(s.memory_spread)})")
    if s.contaminated:
        flags.append(f"device memory contaminated in {plural(len(s.contaminated), 'repeat')}, not used")
    if s.device_disagrees:
        flags.append(f"device memory moved across repeats ({_spread(s.device_spread)}), the lowest used")
    if s.throughput is not None and s.throughput.outliers:
        flags.append(f"{plural(len(s.throughput.outliers), 'throughput outlier')} left out of the tests")
    if s.error:
        flags.append(s.error if len(s.error) <= 80 else s.error[:77] + "...")
    return "; ".join(flags)


def _state(s: SettingFigures) -> str:
    """How its repeats ended, in the table's words: a setting that fits by taking (nearly) the whole card is called
    so (the choice's WHOLE_CARD reason says it in full)."""
    if not s.fits:
        return f"{s.state} {s.failed_repeats}/{s.repeats}"
    return "whole card" if s.whole_card else str(s.state)


def _row(s: SettingFigures, choice: ChoiceRecord) -> list[str]:
    t = s.throughput
    throughput = "-" if t is None else format_rate(t.median, s.unit)
    if t is not None and t.ci_low is not None and t.ci_high is not None:
        throughput += f" [{format_number(t.ci_low)}-{format_number(t.ci_high)}]"
    return [
        s.label + (" (best)" if s.conf == choice.conf else ""),
        _state(s),
        format_bytes(s.memory_figure),
        format_bytes(s.peak_allocated_bytes),
        "-" if s.reserved_ratio is None else f"{s.reserved_ratio:.2f}",
        "-" if s.fragmentation is None else f"{s.fragmentation:.1%}",
        "-" if s.num_alloc_retries is None else str(s.num_alloc_retries),
        throughput,
        _versus(s, choice, short=False),
        *_predicted(s, choice),
        _flags(s),
    ]


def _predicted(s: SettingFigures, choice: ChoiceRecord) -> list[str]:
    """The driver calls per steady step the replay counts for `s`, and its predicted slowdown."""
    p = prediction(choice, s.conf)
    return [calls_cell(p), predicted_cell(p)]


def title(choice: ChoiceRecord) -> str:
    budget = f" · budget {format_bytes(choice.budget_bytes)}" if choice.budget_bytes else ""
    return f"{choice.workload or 'workload'} · {choice.env_id} · {figures_kind(choice)}{budget}"


def _device(choice: ChoiceRecord) -> bool:
    """The choice compared device memory: its group's settings use different backends."""
    return choice.memory_measure is MemoryMeasure.DEVICE


def columns(choice: ChoiceRecord) -> tuple[str, ...]:
    """The table's headers: where backends differ, the memory column is the driver-level peak the choice used."""
    if _device(choice):
        return tuple(str(MemoryMeasure.DEVICE) if c == MemoryMeasure.RESERVED else c for c in COLUMNS)
    return COLUMNS


_VERDICT = {"no significant difference": "n.s.", "not tested (too few repeats)": "?"}
_LEGEND = {"n.s.": "n.s. = no significant difference from the default (paired t-test on per-round ratios; "
                   "±x% = the smallest difference the sweep could detect)",
           "?": "? = throughput not tested (one repeat cannot tell a difference from noise)"}
AGAINST = "†"   # after a ratio whose medians point the other way (results/figures.Comparison.against)
AGAINST_LEGEND = (f"{AGAINST} = the medians beside it point the other way: the ratio is the mean of each round's "
                  f"ratio to the default's run beside it (paired), each median is of all its runs")


def markdown_ranked(choice: ChoiceRecord) -> str:
    """The group's table for summary.md, every column in full but those with nothing to say in them (a simulated
    sweep has no throughput; flags only when some setting has one), and the legend of a ratio marked AGAINST."""
    rows = [_row(s, choice) for s in choice.settings]
    said = [["-" if cell == "baseline" else cell for cell in row] for row in rows]   # a baseline alone says nothing
    keep = keep_columns(COLUMNS, said, always=COLUMNS[:4])
    headers = columns(choice)
    table = markdown_table([headers[j] for j in keep], ([row[j] for j in keep] for row in rows))
    return table + (f"\n\n{AGAINST_LEGEND}" if _any_against(choice) else "")


def _terminal_row(s: SettingFigures, choice: ChoiceRecord) -> list[str]:
    """The row in at most 100 columns: the chosen setting's state says 'best'; throughput without its interval,
    the comparison with a short verdict; flags go under the table (summary.md has every column in full)."""
    t = s.throughput
    return [s.label, "best" if s.conf == choice.conf else _state(s),
            format_bytes(s.memory_figure), "-" if s.reserved_ratio is None else f"{s.reserved_ratio:.2f}",
            "-" if s.num_alloc_retries is None else str(s.num_alloc_retries),
            "-" if t is None else format_number(t.median), _versus(s, choice), *_predicted(s, choice)]


def _versus(s: SettingFigures, choice: ChoiceRecord, short: bool = True) -> str:
    """The 'vs default' cell of every format: the ratio, marked AGAINST where the medians beside it point the other
    way, its interval and the verdict (`short` for the terminal: 2 digits, n.s.); the winner of one confirmation
    pair: what one pair can detect."""
    c = s.vs_default
    if s.is_default:
        return "baseline"
    if s.conf == choice.conf and (pair := confirmed_pair(choice)) is not None:
        return pair_cell(pair)
    if c is None:
        return "-"
    width = "" if c.half_width is None else f" ±{figure(c.half_width, '.1%')}"
    verdict = _VERDICT.get(c.verdict, c.verdict) if short else c.verdict
    return f"{times(c.ratio, 2 if short else 3)}{AGAINST if _against(s, choice) else ''}{width} {verdict}"


def _against(s: SettingFigures, choice: ChoiceRecord) -> bool:
    """`s`'s ratio to the default and the two medians the table prints point different ways."""
    default = choice.default
    mine, base = s.throughput, default.throughput if default is not None else None
    return (s.vs_default is not None and mine is not None and base is not None
            and s.vs_default.against(mine.median, base.median))


def _any_against(choice: ChoiceRecord) -> bool:
    return any(AGAINST in _versus(s, choice) for s in choice.settings)


def ranked_table(choice: ChoiceRecord, width: int) -> tuple[Table, list[str]]:
    """The settings of `choice`'s group, fitting ones by peak reserved, then failures, in `width` columns: no cell
    breaks (but 'vs default' between words, where nothing else fits), empty columns are left out, and settings too
    long for the table are numbered in it and given whole in the lines returned beside it (tables.most_that_fit)."""
    group = choice.settings
    unit = next((s.unit for s in group if s.unit), None) or "units"
    memory = "peak\ndevice" if _device(choice) else "peak\nreserved"
    headers = ["setting", "state", memory, "res/\nalloc", "retries", f"{unit}\n/s", "vs\ndefault", "driver\ncalls\n/step",
               PREDICTED_HEADER]
    rows = [_terminal_row(s, choice) for s in group]
    # A baseline alone, or no retries anywhere, says nothing.
    said = [["-" if cell == "baseline" or (j == 4 and cell == "0") else cell for j, cell in enumerate(row)]
            for row in rows]
    keep = keep_columns(headers, said, always=headers[:3])

    def table_of(labels: list[str], wrap: bool = False) -> Table:
        table = Table(title=title(choice), box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        add_setting_column(table, labels)
        for j in keep[1:]:
            table.add_column(headers[j], justify="right" if j in (2, 3, 4, 5, 7, 8) else "left",
                             no_wrap=not (wrap and j == 6))
        for s, row, label in zip(group, rows, labels):
            style = "bold green" if s.conf == choice.conf else ("red" if not s.fits else None)
            table.add_row(label, *(row[j] for j in keep[1:]), style=style)
        return table

    # Too wide even with its settings numbered (an in-process winner's cell is a phrase: '1.00x ±0.3%, 8 blocks in
    # one process'): the 'vs default' column wraps between words.
    return most_that_fit([table_of, lambda labels: table_of(labels, wrap=True)], [row[0] for row in rows], width)


def print_choice(console, choice: ChoiceRecord) -> None:
    """What sweep and report show of one choice (its record, `report/analysis.choice_record`): the ranked table,
    what it leaves unsaid (flags, abbreviations, an interrupted sweep) and the reasons, within the console's width."""
    group = choice.settings
    print_numbered(console, *ranked_table(choice, console.width))
    notes = [(f"{s.label}: {flags}", "yellow") for s in group if (flags := _flags(s))]
    if not any(s.num_alloc_retries for s in group):
        notes.append(("no setting needed an alloc retry", "dim"))
    verdicts = {_versus(s, choice) for s in group}
    notes += [(text, "dim") for mark, text in _LEGEND.items() if any(v.endswith(f" {mark}") for v in verdicts)]
    if _any_against(choice):
        notes.append((AGAINST_LEGEND, "dim"))
    if (pair := confirmed_pair(choice)) is not None:
        notes.append((pair_legend(pair), "dim"))
    if any(s.conf in choice.predictions for s in group):
        notes.append((PREDICTED_LEGEND, "dim"))
    if note := incomplete_note(choice):
        notes.append((note, "bold red"))
    notes += [(reason, "") for reason in choice.reasons]
    if choice.precision_data is not None and choice.precision_data.code == Code.PRECISION_SHORT.value:
        notes.append((f"precision: {choice.precision}", "yellow"))   # the table's ±x% says less
    for text, style in notes:
        say(console, Text(INDENT + text, style=style))


def incomplete_note(choice: ChoiceRecord) -> str | None:
    """One line when the sweep stopped before its end, or recorded fewer trials than it planned."""
    if choice.complete:
        return None
    return (f"INCOMPLETE: {how_far(choice.trials_recorded, choice.trials_planned)}; this "
            f"decision rests on those alone and no {BEST_FILE} is written (run the sweep command again to resume "
            f"it, or take this choice with export --allow-incomplete)")
