"""Tables, built once for every format: terminal tables that fit the width (report/layout.py: a setting name breaks
only between its keys, after the comma that ends one, never inside a key or its value (a list's values stay on one
line), and only where it does not fit whole; where even that does not fit, the longest settings are numbered and
given whole below; columns with nothing to say are left out) and the same rows as Markdown."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from .layout import unbreakable_words

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from ..results.records import DriverWork

    Cell = str | Text   # a cell's text, plain (never read as rich markup), or a rich Text for its style

EMPTY = ("", "-")
FIGURE = {"justify": "right", "no_wrap": True}   # a column of figures: right-aligned, never broken


def figures_table(headers: Sequence[str], rows: Iterable[Sequence[Cell]], *, title: str, caption: str | None = None,
                  setting: int | None = None, column: dict[int, dict] | None = None) -> Table:
    """The plain table of replay, search and the like: rows of figures under a rule, no outer padding. Column
    `setting` holds setting names (never broken); the others are FIGURE unless `column` gives them other rich
    column options."""
    from rich import box
    from rich.table import Table

    rows = list(rows)
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for j, header in enumerate(headers):
        if j == setting:
            add_setting_column(table, (str(row[j]) for row in rows), header)
        else:
            table.add_column(header, **(column or {}).get(j, FIGURE))
    for row in rows:
        table.add_row(*row)
    return table


def markdown_table(headers: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """The rows as a Markdown table; a '|' in a cell is escaped, a line break becomes a space."""
    headers = list(headers)
    return "\n".join([_md_row(headers), "|" + "---|" * len(headers)] + [_md_row(row) for row in rows])


def _md_row(cells: Iterable[str]) -> str:
    return "|" + "".join(f" {_md_cell(str(c))} |" for c in cells)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def add_setting_column(table, labels: Iterable[str], header: str = "setting", **kw) -> None:
    labels = list(labels)
    width = max([len(line) for label in labels for line in label.split("\n")] + [len(header)])
    table.add_column(header, no_wrap=True, min_width=width, **kw)


def natural_width(table) -> int:
    """The columns `table` takes when nothing in it is squeezed: more than the console's means its settings
    cannot stand whole in it."""
    return measured(table).maximum


def measured(table):
    """`table`'s least and greatest widths on a console wide enough for any, its cells read as plain text as the
    printing console reads them (cli/args.console): a cell may hold a user's path such as 'o[/]ut'."""
    from rich.console import Console

    return Console(width=10_000, markup=False, emoji=False).measure(table)


def _unbreakable(table) -> int:
    """Each column's least width made what its cells need unbroken (a figure, a setting, a cell that does not wrap
    whole; a wrapping cell its longest word: 'p = 0.046' is one), and the table's width at those least widths: below
    it rich would cut a figure, so the table is printed that wide instead, past a narrower console."""
    from rich.text import Text

    for column in table.columns:
        texts = [Text(c) if isinstance(c, str) else c for c in column.cells if isinstance(c, (str, Text))]
        plain = [t.plain for t in texts] + [str(column.header)]
        need = max((len(line) for text in plain for line in text.split("\n")) if column.no_wrap
                   else (len(word) for text in plain for word in unbreakable_words(text)), default=0)
        column.min_width = max(column.min_width or 0, need)
    return measured(table).minimum


def print_table(console, table) -> None:
    """`table` on `console`, no figure cut: wider than the console where its cells need it (`_unbreakable`); a
    title or caption wider than the table is printed above or below it as wrapped lines (rich would centre it over
    the table, broken into the table's width)."""
    from rich.text import Text

    from .layout import say

    least = _unbreakable(table)
    width = natural_width(table)
    title, caption = table.title, table.caption
    if title is not None and len(str(title)) > width:
        say(console, Text(str(title), style="bold"))
        table.title = None
    if caption is not None and len(str(caption)) > width:
        table.caption = None
    else:
        caption = None
    narrower, console.width = console.width, max(console.width, least)   # print(width=) is capped at the console's
    try:
        console.print(table)
    finally:
        console.width = narrower
    if caption is not None:
        say(console, Text(str(caption), style="dim"))


def print_numbered(console, table, below: Sequence[str]) -> None:
    """A table from `whole_settings` and the lines below it that give each numbered setting whole (and any more
    such notes): each line as it is, never wrapped, so that a setting can be copied from it."""
    from rich.text import Text

    print_table(console, table)
    for line in below:
        console.print(Text(line), soft_wrap=True)


def whole_settings(make: Callable[[list[str]], Table], settings: list[str],
                   width: int) -> tuple[Table, list[str]]:
    """`make(labels)` with each setting as its label where the table still fits `width` (`numbered`'s rule), and
    the lines that give each numbered setting whole, to print below the table. A table fits where print_table
    prints it within `width`: its wrapping columns (prose) broken between words, never a figure or a setting
    (`_unbreakable`)."""
    labels, below = numbered(settings, _within(make, width))
    return make(labels), below


def most_that_fit(makes: Sequence[Callable[[list[str]], Table]], settings: list[str],
                  width: int) -> tuple[Table, list[str]]:
    """Of tables that differ in how many optional columns they hold (`makes`, most first), the first that fits
    `width` with its settings as `whole_settings` gives them (whole, folded, or the fewest numbered), else the last:
    the table and the lines below it. Fewer columns never make a table wider, so it is searched for by
    halves."""
    def fitting(i: int) -> bool:
        fits = _within(makes[i], width)
        return fits(numbered(settings, fits)[0])

    low, high = 0, len(makes) - 1
    while low < high:
        middle = (low + high) // 2
        if fitting(middle):
            high = middle
        else:
            low = middle + 1
    return whole_settings(makes[low], settings, width)


def _within(make: Callable[[list[str]], Table], width: int) -> Callable[[list[str]], bool]:
    return lambda labels: _unbreakable(make(labels)) <= width


def numbered(settings: list[str], fits: Callable[[list[str]], bool]) -> tuple[list[str], list[str]]:
    """The one rule of every table that names settings: each setting is its own label where the table still
    `fits`; else the settings are folded (`fold`) to the widest column that fits; only where even the narrowest
    fold does not fit are the longest numbered, as few as it takes ((1), (2), ... in the table's order). Returns
    the labels and the lines that give each numbered setting whole."""
    if fits(settings):
        return settings, []
    narrowest = max(len(piece) for setting in settings for piece in _pieces(setting))
    low, high = narrowest, max(map(len, settings))   # the widest fold that fits: folding narrower never widens it
    while low < high:
        middle = (low + high + 1) // 2
        if fits([fold(s, middle) for s in settings]):
            low = middle
        else:
            high = middle - 1
    folded = [fold(s, low) for s in settings]
    if fits(folded):
        return folded, []
    return _numbered(settings, folded, fits)


def fold(setting: str, width: int) -> str:
    """`setting` in lines of at most `width` characters, broken only between its keys (after the comma that ends
    one), each line as full as it goes; a key longer than `width` stands whole on its line."""
    lines = [""]
    for piece in _pieces(setting):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(lines)


def _pieces(setting: str) -> list[str]:
    """A setting's unbreakable pieces: each key with its value, a list's brackets and the commas between its values
    included, and the comma that ends it."""
    return re.findall(r"(?:\[[^\]]*\]?|[^,\[])+,?|,", setting) or [setting]


def _numbered(settings: list[str], labels: list[str],
              fits: Callable[[list[str]], bool]) -> tuple[list[str], list[str]]:
    """`labels` with the fewest settings numbered that make the table fit, the longest first; a setting in two
    rows (confirmed at two values) is one number and one line below. Where numbering every one would not make it
    fit, none is: the table is as narrow as its figures let it be (print_table), and the settings stand in it."""
    longest_first = sorted(dict.fromkeys(settings), key=lambda s: -len(s))

    def labelled(count: int) -> tuple[list[str], list[str]]:
        chosen, below = set(longest_first[:count]), []
        numbers: dict[str, int] = {}
        for setting in settings:
            if setting in chosen and setting not in numbers:
                numbers[setting] = len(numbers) + 1
                below.append(f"  ({numbers[setting]}) {setting}")
        return [f"({numbers[s]})" if s in chosen else label for s, label in zip(settings, labels)], below

    if not fits(labelled(len(longest_first))[0]):
        return labels, []
    low, high = 0, len(longest_first)   # the fewest numbered that fit: numbering more never widens the table
    while low < high:
        middle = (low + high) // 2
        if fits(labelled(middle)[0]):
            high = middle
        else:
            low = middle + 1
    return labelled(low)


def keep_columns(headers: Sequence[str], rows: Sequence[Sequence[Cell]],
                 always: Iterable[str] = ()) -> list[int]:
    """Indexes of the columns to show: those in `always`, and those where some row has something to say."""
    always = set(always)
    return [j for j, name in enumerate(headers)
            if name in always or any(str(row[j]).strip() not in EMPTY for row in rows)]


def size_unit(values: Iterable[int | None]) -> tuple[str, int]:
    """One unit for a column of byte counts ('GiB', 2**30), so that cells are bare numbers and the unit sits in
    the header: columns stay narrow."""
    top = max((v for v in values if v is not None), default=0)
    return ("GiB", 2**30) if top >= 2**30 else ("MiB", 2**20)


def in_unit(value: int | None, unit: tuple[str, int]) -> str:
    return "-" if value is None else f"{value / unit[1]:,.2f}"


def driver_headers(whole_run: bool) -> list[str]:
    """The two columns of the driver work a replay counts (results.records.DriverWork): its driver calls and its
    waits for the device, per steady step, or over the whole run where the trace marks no steady step."""
    per = "run" if whole_run else "step"
    return [f"driver\ncalls\n/{per}", f"syncs\n/{per}"]


def driver_caption(steps: int | None) -> str:
    """What those columns count, in words: per steady step of `steps`, or (None) over the whole run."""
    what = "driver calls (cudaMalloc, cudaFree, page maps and unmaps) and syncs (waits for the device) replayed"
    if steps is None:
        return f"{what} over the whole run: the trace marks no steady step"
    return f"{what} per steady step ({steps} after the warm-up)"


def driver_cells(work: DriverWork | None) -> list[str]:
    return ["-", "-"] if work is None else [driver_count(work.calls), driver_count(work.syncs)]


def driver_count(value: float) -> str:
    return "0" if value == 0 else f"{value:.2f}" if value < 10 else f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def driver_phrase(work: DriverWork) -> str:
    """The driver work counted by one replayed trial, in a line of progress that says it was replayed."""
    per = "over the run" if work.whole_run else "a step"
    return f"{driver_count(work.calls)} driver calls, {driver_count(work.syncs)} syncs {per}"
