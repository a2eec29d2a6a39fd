"""What `alloctune search` shows: what was searched, then the Pareto front (peak reserved, retries, keys), each
member with the reason it is there, within the width (report/layout.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from ..results.provenance import Provenance
from ..results.vocabulary import signed_percent
from ..sim.search import SearchResult
from ..sim.target import simulated_torch
from ..units import format_bytes
from .layout import say
from .provenance import origin, title
from .tables import driver_caption, driver_cells, driver_headers, figures_table, natural_width, print_table

if TYPE_CHECKING:
    from rich.console import Console


def print_front(console: Console, result: SearchResult, warnings: list[str], source: Provenance) -> None:
    """The search's line (with where the trace came from, `source`), `warnings`, the front's table and its members'
    reasons, and the search's notes."""
    say(console, Text.assemble((result.trace, "bold"), f": {len(result.candidates)} settings replayed as torch "
                 f"{simulated_torch(result.torch_version)} in {result.seconds:.1f} s ({result.rounds} refinement round"
                 f"{'' if result.rounds == 1 else 's'}); "
                 f"{result.equivalent} more behave like one of them on this trace; {len(result.rejected)} "
                 f"refused by torch or the rules; device memory {format_bytes(result.device_memory)}"
                 + (f", budget {format_bytes(result.budget_bytes)}" if result.budget_bytes else "")
                 + ("" if source.measured else f"; {origin(source)}")))
    for warning in warnings:
        say(console, Text.assemble(("warning:", "yellow"), " ", warning))
    # A setting is what the user copies: it never breaks. When the longest does not fit beside the figures,
    # the settings go whole on the numbered lines below the table instead.
    table = front_table(result, with_setting=True, source=source)
    whole = natural_width(table) <= console.width
    print_table(console, table if whole else front_table(result, with_setting=False, source=source))
    for n, member in enumerate(result.front, 1):
        if not whole:   # a setting longer than the line runs past it rather than break
            console.print(Text(f"  {n}. {member.candidate.conf}"), soft_wrap=True)
        say(console, Text(f"  {n}. {member.reason}" if whole else f"     {member.reason}"), rest="     ")
    if not result.front:
        say(console, "No setting replayed without running out of memory.", style="red")
    for note in result.notes:
        say(console, Text(f"note: {note}", style="dim"))


def front_table(result: SearchResult, with_setting: bool, source: Provenance):
    """The front as a table: number, setting (unless `with_setting` is false), peak reserved, reserved/allocated,
    retries, the driver work predicted (per steady step, or over the run where the trace marks no steady step),
    keys, and the change against the default."""
    default = result.default
    works = [w for m in result.front if m.candidate.outcome.result and (w := m.candidate.outcome.result.driver_work)]
    whole_run = any(w.whole_run for w in works)
    rows = []
    for n, member in enumerate(result.front, 1):
        c = member.candidate
        vs = (signed_percent(c.peak_reserved / default.peak_reserved - 1)
              if default and default.fits and not c.setting.is_default else "-")
        rows.append([str(n), *([c.conf] if with_setting else []), format_bytes(c.peak_reserved),
                     f"{c.ratio:.3f}" if c.ratio else "-", str(c.retries),
                     *driver_cells(c.outcome.result.driver_work if c.outcome.result else None), str(c.keys), vs])
    headers = ["#", *(["setting"] if with_setting else []), "peak\nreserved", "res/\nalloc", "retries",
               *driver_headers(whole_run), "keys", "vs\ndefault"]
    caption = driver_caption(None if whole_run else works[0].steps) if works else None
    return figures_table(headers, rows, title=title(source, "Pareto front: peak reserved, retries, keys"),
                         caption=caption,
                         setting=1 if with_setting else None, column={0: {"justify": "right"}})
