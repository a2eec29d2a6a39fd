"""`alloctune fit`'s output: the curve per setting, the answer per setting under each limit (the largest value,
what it rests on, the headroom, the value above it to confirm, copies at once) and what the GPU said where it
confirmed them; and the plot of peak reserved against the value with the limits as lines. A fit of dry runs' traces
says so in its first line, its tables' titles and its plot (report/provenance.py's words). A table with a column (or
a cell's part) per value shows as many values as fit the width, evenly spread, the first and the last among them,
and says which it left out: --json and fit.json hold every one."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rich.text import Text

from ..decide.fit import EXTRAPOLATION, known
from ..files import write_file
from ..results.fits import Answer, CopiesConfirmation, Confirmation, CurveRecord, FitFile, LimitFit, SettingFit
from ..results.vocabulary import Basis
from ..settings.conf import conf_label
from ..units import GiB, format_bytes, plural
from .fitwords import OVERHEAD_WORDS, exact_lines, margin_lines
from .layout import say
from .provenance import dry_run_words, titled
from .tables import figures_table, in_unit, most_that_fit, print_numbered, size_unit, whole_settings

if TYPE_CHECKING:
    from rich.table import Table

Rows = tuple[list[str], list[list[str]], dict]   # a table's headers, rows (the setting first) and figures_table options


# The peaks the curves are fitted to, as every output names them: a limit can hold less (max_split_size_mb releases
# cached oversize blocks as the room runs out), so they may differ from what replay prints for a card.
UNLIMITED = "without a memory limit"
# What the answers' headroom and copies at once rest on (decide/fit.Largest.need_bytes, decide/fit.copies).
NEEDS = ("Headroom: what the limit leaves over what the largest value needs: the least room it runs in without an OOM "
         "or an alloc retry (replay --min-memory's rule, less the context) where replayed, the curve's peak where the "
         "curve decides. Copies at once: how many fit together in the limit's memory (a card's; a budget and one "
         "context), each at its peak without a limit and its context: one process cannot take another's cache.")


def curve_words(curve: CurveRecord, param: str) -> str:
    """'line', 'parabola' or 'constant', in `param`."""
    return {0: "constant", 1: f"line in {param}", 2: f"parabola in {param}"}[len(curve.coefficients) - 1]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def origin(fit: FitFile) -> str | None:
    """'a dry run for CARD (table row ...; made up N values ...)' where the fit's traces are a dry run's; None:
    recordings on a GPU."""
    d = fit.dry_run
    return None if d is None else dry_run_words(d.card, d.table, d.invented, d.invented_by_kind)


def fit_title(fit: FitFile, text: str) -> str:
    """A table's or the plot's title: 'Dry run (nothing measured). ...' where the traces are a dry run's."""
    return titled(len(fit.values) if fit.dry_run else 0, len(fit.values), text)


def limit_title(limit: LimitFit, fit: FitFile) -> str:
    if limit.budget is None:
        card = format_bytes(limit.device_bytes, 0)
        return f"On a {card} card: {format_bytes(limit.capacity_bytes)} for the allocator"
    gpu = "the recording GPU" if fit.dry_run is None else f"the {fit.dry_run.card} the dry run stands for"
    where = f"Under budget {limit.budget} ({format_bytes(limit.budget_bytes)}) of {gpu}"
    if limit.capacity_bytes == limit.budget_bytes:
        return where
    return f"{where}: {format_bytes(limit.capacity_bytes)} for the allocator, the rest holds the context"


def _table(headers: list[str], rows: list[list[str]], table: dict) -> Callable[[list[str]], Table]:
    """The table of `rows` with each row's setting (its first cell) as the label given."""
    def make(labels: list[str]):
        return figures_table(headers, [[label, *row[1:]] for label, row in zip(labels, rows)], setting=0, **table)

    return make


def _print(console, headers: list[str], rows: list[list[str]], **table) -> None:
    """A table whose first column is the setting: folded, or numbered and the settings given whole below, where
    they do not fit the width. Each table numbers its own settings, (1), (2), ... down its rows, and gives them whole
    right below it: the tables of one fit number different settings (a card's answers can need more room than the
    curves)."""
    print_numbered(console, *whole_settings(_table(headers, rows, table), [row[0] for row in rows], console.width))


def _print_values(console, fit: FitFile, rows_at: Callable[[list[int]], Rows]) -> None:
    """A table with a column (or a cell's part) per value, `rows_at` the indexes of those shown: with every value
    where the table fits the width (its settings whole, folded or numbered, as every table's), else with as many as
    fit (the first and the last always); those left out said in its caption."""
    makes, settings = [], []
    for n in range(len(fit.values), 1, -1):
        shown = _spread(len(fit.values), n)
        headers, rows, table = rows_at(shown)
        left = [str(v) for i, v in enumerate(fit.values) if i not in shown]
        if left:
            note = f"{fit.param} {', '.join(left)} left out to fit the width: --json gives every value"
            table = dict(table, caption="; ".join(filter(None, [table.get("caption"), note])))
        makes.append(_table(headers, rows, table))
        settings = [row[0] for row in rows]
    drawn, below = most_that_fit(makes, settings, console.width)
    print_numbered(console, drawn, below)


def _spread(count: int, n: int) -> list[int]:
    """`n` of `count` indexes, evenly spread, the first and the last among them."""
    return sorted({round(i * (count - 1) / (n - 1)) for i in range(n)}) if n < count else list(range(count))


def print_fit(console, fit: FitFile, simulated_torch: str | None = None) -> None:
    """fit.json's answer as text; `simulated_torch`: the torch whose allocator the replays followed (sim/target.py),
    stated as replay, search and fleet state it."""
    dry = origin(fit)
    values = f"{fit.param} {', '.join(map(str, fit.values))}"
    made = f"recorded at {values}" if dry is None else f"traced at {values} by {dry}: nothing was measured"
    followed = f" Replayed with torch {simulated_torch}'s allocator." if simulated_torch else ""
    say(console, f"Peak memory in {fit.param}, {made}; each process holds a "
                 f"CUDA context of {format_bytes(fit.overhead_bytes)} outside the allocator "
                 f"({OVERHEAD_WORDS[fit.overhead_from]}).{followed}")
    for warning in fit.warnings:
        say(console, Text.assemble(("warning:", "yellow"), " ", warning))
    _curves_table(console, fit)
    for limit in fit.limits:
        _limit_table(console, fit, limit)
        if limit.confirmed:
            _confirmed_table(console, fit, limit)
        if limit.copies_confirmed:
            copies_table(console, fit, limit)
    if any(limit.answers for limit in fit.limits):
        say(console, NEEDS)
    for line in exact_lines(fit):
        say(console, line)
    for line in margin_lines(fit):
        say(console, line)
    # two values have no leave-one-out at all (margin_lines says so): nothing to call weak
    weak = any(s.reserved is not None and s.reserved.loo_weak and s.reserved.loo_error is not None
               for s in fit.settings)
    if weak and any(not a.exact for limit in fit.limits for a in limit.answers):
        say(console, f"With {len(fit.values)} recorded values a leave-one-out predicts each from "
                     f"{len(fit.values) - 1} others: it tests the curve little; record more values to test it more.")
    # a dry run's answers are replayed (from its traces) or predicted, each as its table says: none is measured
    confirm = ("confirm an answer on the GPU with --confirm" if dry is None else
               "the dry runs measured nothing: confirm an answer on a GPU with a fit's --confirm, without --dry-run")
    say(console, f"Values above {fit.values[-1]} are extrapolated from the curve (up to {EXTRAPOLATION:g} times the "
                 f"largest recorded; '+': more may fit); {confirm}.")


def _curves_table(console, fit: FitFile) -> None:
    made = "recorded" if fit.dry_run is None else "traced"
    unit = size_unit(p.peak_reserved_bytes for s in fit.settings for p in s.points)
    caption = "; ".join(f"{conf_label(s.conf)}: not simulated, {s.reason}" for s in fit.settings if s.reason) or None
    title = fit_title(fit, f"Peak reserved ({unit[0]}), replayed {UNLIMITED} at each {made} {fit.param}, and its "
                           f"curve")

    peaks = [_peaks(s, fit, unit) for s in fit.settings]

    def rows_at(shown: list[int]) -> Rows:
        rows = [[conf_label(s.conf), *[cells[i] for i in shown], *_curve_cells(s, fit.param)]
                for s, cells in zip(fit.settings, peaks)]
        headers = ["setting", *(f"{fit.param}\n{fit.values[i]}" for i in shown), "fit", "error\nat points",
                   "leave-\none-out"]
        # the curve's words wrap ('parabola' over 'in batch'): with five values the table then fits 80 columns
        return headers, rows, dict(column={len(shown) + 1: {}}, title=title, caption=caption)

    _print_values(console, fit, rows_at)


def _peaks(s: SettingFit, fit: FitFile, unit) -> list[str]:
    if s.reason is not None:
        return ["n/a"] * len(fit.values)
    return [in_unit(p.peak_reserved_bytes, unit) for p in s.points]


def _curve_cells(s: SettingFit, param: str) -> list[str]:
    if s.reserved is None:
        return ["-", "-", "-"]
    return [curve_words(s.reserved, param), _percent(s.reserved.max_error), _percent(s.reserved.loo_error)]


def _largest(a: Answer) -> str:
    return "none" if a.largest is None else f"{a.largest}{'+' if a.capped else ''}"


def _limit_table(console, fit: FitFile, limit: LimitFit) -> None:
    unit = size_unit([limit.capacity_bytes])
    exact = sum(a.exact for a in limit.answers)
    table = dict(column={2: {"no_wrap": True}}, title=fit_title(fit, limit_title(limit, fit)),
                 caption=f"replays: exact, the value and the next one {'traced' if fit.dry_run else 'recorded'} and "
                         f"replayed ({exact} of {len(limit.answers)})" if exact else None)

    def rows_at(shown: list[int]) -> Rows:
        rows = [[conf_label(a.conf), _largest(a), _basis(a), _margin(a), in_unit(a.headroom_bytes, unit),
                 str(a.next_value), "/".join(str(a.copies[i]) for i in shown)] for a in limit.answers]
        headers = ["setting", f"largest\n{fit.param}", "from", "margin", f"head-\nroom\n{unit[0]}",
                   "next\n(con-\nfirm)", f"copies\nat once\nat {'/'.join(str(fit.values[i]) for i in shown)}"]
        return headers, rows, table

    _print_values(console, fit, rows_at)


def _basis(a: Answer) -> str:
    """What the answer rests on: 'replays' where it is exact (its value and the next both recorded and replayed),
    else its value's replay, or the curve's part (interpolated, extrapolated)."""
    return "replays" if a.exact else a.curve or ("replayed" if a.basis == Basis.REPLAYED else "curve")


def _margin(a: Answer) -> str:
    """The curve's margin on the answer: '-' where replays decided it, 'none' where nothing tested the curve."""
    return "none" if a.margin_why else "-" if a.margin is None else f"+{_percent(a.margin)}"


def _confirmed_table(console, fit: FitFile, limit: LimitFit) -> None:
    rows = [[conf_label(c.conf), str(c.value), "(search)" if c.searched else
             "runs" if c.predicted_runs else "does not run", _on_gpu(c),
             "-" if c.searched or c.agreed is None else "yes" if c.agreed else "NO"] for c in limit.confirmed]
    checks = [c for c in limit.confirmed if not c.searched]
    said = [c for c in checks if c.agreed is not None]
    searched = len(limit.confirmed) - len(checks)
    notes = ([f"{len(checks) - len(said)} said nothing of memory"] if len(said) < len(checks) else []) + \
        ([f"{plural(searched, 'run')} more searched"] if searched else [])
    _print(console, ["setting", fit.param, "predicted", "on the GPU", "agreed"], rows,
           column={2: {"no_wrap": True}, 3: {"no_wrap": True}},
           title=f"Confirmed on the GPU under budget {limit.budget}: {sum(bool(c.agreed) for c in said)} of "
                 f"{len(said)} agreed" + "".join(f"; {n}" for n in notes))
    for answer in limit.answers:
        line = _after_gpu(fit, limit, answer)
        if line:
            say(console, line)


def copies_table(console, fit: FitFile, limit: LimitFit) -> None:
    """Copies at once run together on the GPU under one budget: per setting, how many were predicted to fit, how
    many ran, each one's peak reserved, and whether the GPU agreed."""
    unit = size_unit([r.peak_reserved_bytes or 0 for c in limit.copies_confirmed for r in c.runs] or [GiB])
    rows = [[conf_label(c.conf), str(c.value), str(c.predicted), _together(c),
             "/".join(in_unit(r.peak_reserved_bytes, unit) for r in c.runs) or "-",
             "-" if c.agreed is None else "yes" if c.agreed else "NO"] for c in limit.copies_confirmed]
    free = {c.free_bytes for c in limit.copies_confirmed if c.free_bytes is not None}
    room = f", {format_bytes(max(free))} left free for them" if free else ""
    headers = ["setting", fit.param, "predicted\nto fit", "ran together", f"peak reserved\neach {unit[0]}", "agreed"]
    _print(console, headers, rows, column={3: {"no_wrap": True}},
           title=f"Copies at once on the GPU under budget {limit.budget}{room} (the budget and one context)")
    for c in limit.copies_confirmed:
        if c.error is not None:
            say(console, f"{conf_label(c.conf)}: not run: {c.error}")


def _together(c: CopiesConfirmation) -> str:
    if not c.runs:
        return "not run"
    ran = sum(r.runs for r in c.runs)
    failed = [r for r in c.runs if not r.runs]
    what = "; ".join(dict.fromkeys(_on_gpu(Confirmation(c.conf, c.value, True, r.state, r.runs,
                                                        num_alloc_retries=r.num_alloc_retries)) for r in failed))
    return f"{ran} of {len(c.runs)} ran" + (f" ({what})" if what else "")


def _on_gpu(c: Confirmation) -> str:
    if c.runs:
        return "runs"
    return c.state if c.state != "ok" else plural(c.num_alloc_retries or 0, "alloc retry", "alloc retries")


def _after_gpu(fit: FitFile, limit: LimitFit, answer: Answer) -> str | None:
    """Where the GPU disagreed with a setting's answer: what the replays and the GPU's runs say together, and the
    GPU's own answer where its runs met a step apart."""
    mine = [c for c in limit.confirmed if c.conf == answer.conf and c.said is not None]
    if all(c.agreed for c in mine if not c.searched):
        return None
    k = known(list(zip(fit.values, answer.runs)), [(c.value, c.runs) for c in mine])
    if k.on_gpu and k.runs is not None and k.fails is not None and k.fails - k.runs <= fit.step:
        return (f"{conf_label(answer.conf)}: the GPU disagreed; on the GPU the largest {fit.param} that runs is "
                f"{k.runs} ({k.fails} does not), against {_largest(answer)} predicted.")
    ran = ("none is known to run" if k.runs is None else
           f"the largest known to run is {k.runs} ({'on the GPU' if k.on_gpu else 'its replay'})")
    fails = "" if k.fails is None else f", {k.fails} does not run on the GPU"
    return f"{conf_label(answer.conf)}: the GPU disagreed; {ran}{fails}."


def plot_fit(fit: FitFile, path: str | os.PathLike, simulated_torch: str | None = None) -> Path:
    """`fit_figure` written to `path` as a PNG."""
    from .plot import plain_text

    with plain_text():   # a setting's or the value's name is a label
        fig = fit_figure(fit, simulated_torch)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
    return path


def fit_figure(fit: FitFile, simulated_torch: str | None = None):
    """Peak reserved against the value per setting: the points replayed without a memory limit (with torch
    `simulated_torch`'s allocator, where given), the curve through them (dashed where extrapolated), what the GPU
    measured where it confirmed (a plus where the value ran, a cross where it did not), and each limit's room for
    the allocator as a line of its own style; the title says what is replayed and predicted, and from which traces.
    Drawn within `plot.plain_text`, as `plot_fit` writes it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .plot import BUDGET_STYLE, DEVICE_STYLE, limit_lines

    fig = Figure(figsize=(9.5, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    top = 0.0
    for s in (s for s in fit.settings if s.reserved is not None):
        top = max(top, _draw_setting(ax, s, fit))
    for style, words in (("-", "curve between recorded values (predicted)"),
                         ("--", f"curve extrapolated, up to {EXTRAPOLATION:g}x the largest recorded (predicted)")):
        ax.plot([], [], style, color="0.3", linewidth=1, label=words)
    if any(c.said is not None for lim in fit.limits for c in lim.confirmed):
        for marker, words in (("P", "on the GPU: ran"), ("X", "on the GPU: did not run")):
            ax.plot([], [], marker, color="0.3", linestyle="none", label=words)
    cards = [lim for lim in fit.limits if lim.budget is None]
    budgets = [lim for lim in fit.limits if lim.budget is not None]
    limits = [(lim.capacity_bytes, f"{format_bytes(lim.device_bytes, 0)} card's room", _nth(DEVICE_STYLE, i))
              for i, lim in enumerate(cards)]
    limits += [(lim.capacity_bytes, f"budget {lim.budget}'s room", _nth(BUDGET_STYLE, i))
               for i, lim in enumerate(budgets)]
    extent = limit_lines(ax, limits, top or 1.0, ax.axhline)
    ax.set_ylim(0, extent * 1.05)
    ax.set_xlabel(fit.param)
    ax.set_ylabel(f"peak reserved (GiB), {UNLIMITED}; limits: the allocator's room")
    ax.set_title(plot_title(fit, simulated_torch), fontsize=8, loc="left")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# Limits of one kind (cards, or budgets) told apart by the line's pattern, then its shade; never dashed, which is an
# extrapolated curve's.
_PATTERNS = ("-", ":", (0, (6, 2, 1, 2)), (0, (3, 1, 1, 1, 1, 1)))
_SHADES = {"dimgray": ("dimgray", "black", "darkgray"), "tab:red": ("tab:red", "darkred", "lightcoral")}


def _nth(base: dict, i: int) -> dict:
    """The style of the `i`-th limit drawn in `base`'s colour: its first in `base`'s own pattern."""
    patterns = (base["linestyle"], *(p for p in _PATTERNS if p != base["linestyle"]))
    shades = _SHADES.get(base["color"], (base["color"],))
    return dict(base, linestyle=patterns[i % len(patterns)], color=shades[i // len(patterns) % len(shades)])


def plot_title(fit: FitFile, simulated_torch: str | None) -> str:
    """What the plot shows: which peaks were replayed (and with which torch's allocator), what the curves are, and
    the traces: the command recorded, the dry runs or the files given."""
    import textwrap

    torch = f" with torch {simulated_torch}'s allocator" if simulated_torch else ""
    made = "recorded" if fit.dry_run is None else "traced"
    what = fit_title(fit, f"Peak reserved in {fit.param}: dots replayed {UNLIMITED}{torch} at each {made} "
                          f"{fit.param}; lines: each setting's curve through them (predicted).")
    dry = origin(fit)
    if dry is not None:
        source = f"Traced by {dry}: nothing measured."
    elif fit.command is not None:
        source = f"Recorded: {' '.join(fit.command)}"
    else:
        source = "Traces: " + ", ".join(f"{fit.param} {v}: {os.path.basename(name)}"
                                        for v, name in zip(fit.values, fit.traces))
    return "\n".join(textwrap.fill(textwrap.shorten(line, 300, placeholder=" ..."), 130) for line in (what, source))


def _draw_setting(ax, s: SettingFit, fit: FitFile) -> float:
    """One setting's points and curve; returns the largest figure drawn, in GiB."""
    import numpy as np

    assert s.reserved is not None
    xs = [p.value for p in s.points]
    ys = [p.peak_reserved_bytes / GiB for p in s.points]
    [line] = ax.plot(xs, ys, "o", markersize=4, label=conf_label(s.conf))
    inside = np.linspace(xs[0], xs[-1], 50)
    beyond = np.linspace(xs[-1], EXTRAPOLATION * xs[-1], 50)
    for span, style in ((inside, "-"), (beyond, "--")):
        curve = np.polyval(s.reserved.coefficients, span) / GiB
        ax.plot(span, curve, style, color=line.get_color(), linewidth=1)
    measured = [c for lim in fit.limits for c in lim.confirmed
                if c.conf == s.conf and c.said is not None and c.peak_reserved_bytes is not None]
    for c in measured:
        ax.plot([c.value], [(c.peak_reserved_bytes or 0) / GiB], "P" if c.said else "X", color=line.get_color(),
                markersize=7, markeredgecolor="black", markeredgewidth=0.5)
    return max(max(ys), float(np.polyval(s.reserved.coefficients, EXTRAPOLATION * xs[-1])) / GiB)
