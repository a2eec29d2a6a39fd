"""The Pareto plot: memory (as the ranked table shows it: `SettingFigures.memory_figure`, peak device memory where
a group's backends differ) against throughput per setting, one panel per (environment, backend, budget): each
decision's record, its settings' figures as it ranks them.

Drawn on a bare `Figure` (Agg canvas), never through pyplot, so it changes no global backend state and needs no
display; every figure alloctune draws (this one, fit's, compare's) is made and written within `plain_text`.
"""
from __future__ import annotations

import math
import os
import textwrap
from dataclasses import replace
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from ..decide.summary import pareto_front
from ..files import write_file
from ..results.choices import ChoiceRecord
from ..results.figures import SettingFigures, Summary
from ..results.vocabulary import Basis
from ..units import GiB, plural
from .provenance import figures_kind


def plain_text():
    """A context in which every text matplotlib makes and draws is taken as it is: a workload, a folder or a setting
    named 'a$x_{$' is never read as TeX math (another text, or a parse error once other files were written)."""
    return matplotlib.rc_context({"text.parse_math": False})


def _caption(failed: list[SettingFigures]) -> str:
    if not failed:
        return ""
    text = "failed: " + ", ".join(f"{s.label} ({s.state} {s.failed_repeats}/{s.repeats})" for s in failed)
    return textwrap.fill(text, 90)


def _role(s: SettingFigures, choice: ChoiceRecord) -> str:
    if s.conf == choice.conf:
        return f"chosen: {s.label}"
    return "default" if s.is_default else s.label


def _gib(value: int | None) -> float:
    return (value or 0) / GiB


def _x(s: SettingFigures) -> float:
    """A setting's place on the memory axis: its memory as the ranked table shows it, in GiB."""
    return _gib(s.memory_figure)


def _axis(choice: ChoiceRecord) -> str:
    """The memory axis' label: the figure the table's memory column and the decision compare."""
    return f"{choice.memory_measure} (GiB)"


def _value(s: SettingFigures) -> str:
    """A point's or bar's figure, and what it means: its memory; 'whole card' where it took (nearly) all."""
    return f"{_x(s):.2f} GiB" + (" · whole card" if s.whole_card else "")


WHOLE_CARD = {"color": "tab:red", "label": "took (nearly) the whole card"}
# matplotlib's limits and ticks overflow within a few orders of the largest float: throughput that large is drawn
# in units of a power of ten, which the axis's label names.
_DRAWABLE = 1e300


def _in_units(points: list[tuple[SettingFigures, Summary]]) -> tuple[list[tuple[SettingFigures, Summary]], float]:
    top = max(max(t.median, t.ci_high or 0) for _, t in points)
    unit = 10.0 ** math.floor(math.log10(top)) if top > _DRAWABLE else 1.0
    if unit == 1:
        return points, unit
    return [(s, replace(t, median=t.median / unit, ci_low=None if t.ci_low is None else t.ci_low / unit,
                        ci_high=None if t.ci_high is None else t.ci_high / unit)) for s, t in points], unit


def _scatter(ax, fitting: list[SettingFigures], choice: ChoiceRecord) -> None:
    # The chosen setting and the default are labelled first, so that others give way to them (_unoverlap).
    points, scale = _in_units(sorted(((s, s.throughput) for s in fitting if s.throughput is not None),
                                     key=lambda p: (p[0].conf != choice.conf, not p[0].is_default)))
    labels, ringed = [], False
    for s, t in points:
        err = None
        if t.ci_low is not None and t.ci_high is not None:
            err = [[max(t.median - t.ci_low, 0)], [max(t.ci_high - t.median, 0)]]
        marker, color = ("*", "tab:green") if s.conf == choice.conf else (("s", "tab:gray") if s.is_default
                                                                      else ("o", "tab:blue"))
        ax.errorbar(_x(s), t.median, yerr=err, fmt=marker, color=color,
                    markersize=12 if s.conf == choice.conf else 6, capsize=3)
        if s.whole_card:   # a ring in the card's colour, named once in the legend
            ax.plot(_x(s), t.median, "o", markersize=13, markerfacecolor="none",
                    markeredgecolor=WHOLE_CARD["color"], markeredgewidth=1.5,
                    label=None if ringed else WHOLE_CARD["label"])
            ringed = True
        important = s.conf == choice.conf or s.is_default
        # Right of the marker, centred on it: the error bar is vertical, so the label never crosses it.
        label = ax.annotate(
            f"{_role(s, choice)} · {_value(s)}", (_x(s), t.median),
            textcoords="offset points", xytext=(12, 0), ha="left", va="center", fontsize=8 if important else 6,
            fontweight="bold" if important else "normal",
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            arrowprops={"arrowstyle": "-", "color": "0.6", "linewidth": 0.5, "shrinkA": 0, "shrinkB": 4})
        label.set_in_layout(False)   # the layout makes room for the legend; the data's labels stay where they point
        labels.append(label)
    front = pareto_front([s for s, _ in points])
    if front:
        median = {id(s): t.median for s, t in points}
        ax.step([_x(s) for s in front], [median[id(s)] for s in front],
                where="post", color="tab:orange", linestyle="--", marker="o", markersize=15, markerfacecolor="none",
                label="Pareto front (less memory, more throughput)")
    top = _limit_lines(ax, fitting, choice, ax.axvline)
    ax.set_xlim(0, top * 1.45)   # room right of the last point for its label
    with_ci = any(t.ci_low is not None for _, t in points)
    if not with_ci:
        # One repeat: no interval to show, and an axis cut near the data would make small differences look large.
        ax.set_ylim(bottom=0, top=max(t.median for _, t in points) * 1.1)
    _legend(ax)
    _unoverlap(ax, labels, [(_x(s), t.median) for s, t in points])
    unit = next((s.unit for s, _ in points if s.unit), "units")
    ax.set_xlabel(_axis(choice))
    ax.set_ylabel(f"throughput ({'' if scale == 1 else f'{scale:g} '}{unit}/s), "
                  + ("median and 95% CI" if with_ci else "one repeat"))


def _legend(ax, extra: list | None = None) -> None:
    """The legend outside the data, under the panel's axis label (the figure's layout makes room for it); `extra`:
    handles drawn for the legend alone."""
    handles, texts = ax.get_legend_handles_labels()
    handles += extra or []
    ax.legend(handles=handles, labels=texts + [h.get_label() for h in extra or []], fontsize=7, loc="upper left",
              bbox_to_anchor=(0, -0.12), borderaxespad=0, ncols=2, frameon=False)


def _unoverlap(ax, labels: list, markers: list[tuple[float, float]]) -> None:
    """Move a label down, step by step, while it overlaps one placed before it or another setting's marker (a thin
    line keeps it tied to its point). Points of close settings sit close together; their names must not print over
    each other, nor hide a point."""
    ax.figure.draw_without_rendering()   # the layout first: it moves the axes, and with them every label
    renderer = ax.figure.canvas.get_renderer()

    def text_box(label):   # the text alone: an Annotation's own extent also covers its (growing) line
        label.update_positions(renderer)   # an offset moved since the last draw takes effect here
        return Text.get_window_extent(label, renderer)

    size = 6 * ax.figure.dpi / 72   # a marker's half-width, in pixels
    placed: list = [Bbox.from_extents(x - size, y - size, x + size, y + size)
                    for x, y in (ax.transData.transform(point) for point in markers)]
    for label in labels:
        step = text_box(label).height * 72 / ax.figure.dpi + 1   # one line, in points
        for _ in range(8):
            if not any(text_box(label).overlaps(other) for other in placed):
                break
            x, y = label.xyann   # offset from the marker, in points
            label.xyann = (x, y - step)
        placed.append(text_box(label))


# A limit further than this times the largest peak is named in the legend, not drawn: the data would shrink to a sliver.
OFF_SCALE = 2.0
BUDGET_STYLE = {"color": "tab:red", "linestyle": "-."}
DEVICE_STYLE = {"color": "dimgray", "linestyle": "-"}


def limit_lines(ax, limits: list[tuple[int, str, dict]], top: float, line) -> float:
    """Lines across the memory axis (`line`: ax.axvline or ax.axhline) at each (bytes, name, style) of `limits`,
    labelled with the figure; one beyond OFF_SCALE times `top` (GiB, the largest peak) is named in the legend only.
    Returns the axis' extent in GiB: `top`, or a limit drawn beyond it."""
    extent = top
    for value, name, style in limits:
        label = f"{name} {value / GiB:.2f} GiB"
        if value / GiB > OFF_SCALE * top:
            ax.plot([], [], linewidth=1.5, label=f"{label} (off the scale)", **style)
        else:
            line(value / GiB, linewidth=1.5, label=label, **style)
            extent = max(extent, value / GiB)
    return extent


def _limit_lines(ax, fitting: list[SettingFigures], choice: ChoiceRecord, line) -> float:
    """The memory the tensors needed (no setting reserves less), the budget every trial ran under and the device's
    memory (a replay's: the simulated card's), as lines (`limit_lines`); returns the axis' extent in GiB."""
    top = max((_x(s) for s in fitting), default=0.0) or 1.0
    floor = min((s.peak_allocated_bytes for s in fitting if s.peak_allocated_bytes), default=0)
    if floor:
        line(floor / GiB, color="black", linestyle=":", linewidth=1,
             label=f"peak allocated {floor / GiB:.2f} GiB (the floor)")
    device = max((s.device_bytes or 0 for s in fitting), default=0)
    limits = ([(choice.budget_bytes, "budget", BUDGET_STYLE)] if choice.budget_bytes else []) + \
        ([(device, "device memory", DEVICE_STYLE)] if device else [])
    return limit_lines(ax, limits, top, line)


def _bars(ax, fitting: list[SettingFigures], choice: ChoiceRecord) -> None:
    # Retries are why a smaller simulated setting can lose: show them beside the name.
    labels = [_role(s, choice)
              + (f" ({plural(s.num_alloc_retries, 'retry', 'retries')})" if s.num_alloc_retries else "")
              for s in fitting]
    colors = ["tab:green" if s.conf == choice.conf else "tab:gray" if s.is_default else "tab:blue" for s in fitting]
    bars = ax.barh(range(len(fitting)), [_x(s) for s in fitting], color=colors)
    for s, bar in zip(fitting, bars):
        if s.whole_card:
            bar.set_hatch("//")
            bar.set_edgecolor(WHOLE_CARD["color"])
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {_value(s)}", va="center", fontsize=7,
                color=WHOLE_CARD["color"] if s.whole_card else "black")
    ax.set_yticks(range(len(fitting)), labels, fontsize=7)
    ax.invert_yaxis()  # lowest peak on top, as in the ranked table
    top = _limit_lines(ax, fitting, choice, ax.axvline)
    ax.set_xlim(0, top * 1.3)   # room for the value labels
    _legend(ax, [Patch(facecolor="white", edgecolor=WHOLE_CARD["color"], hatch="//", label=WHOLE_CARD["label"])]
            if any(s.whole_card for s in fitting) else None)
    ax.set_xlabel(_axis(choice) + (f", {Basis.REPLAYED.value}" if choice.simulated else ""))


@plain_text()
def plot_pareto(choices: list[ChoiceRecord], path: str | os.PathLike) -> Path:
    """Write the PNG and return its path. Groups without throughput (replayed) get a bar chart of memory."""
    path = Path(path)
    panels = max(len(choices), 1)
    fig = Figure(figsize=(9.5 * panels, 5.5), layout="constrained")   # the layout makes room for outside legends
    FigureCanvasAgg(fig)   # a renderer to measure labels with (_unoverlap)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    for ax, choice in zip(axes, choices):
        group = choice.settings
        fitting = [s for s in group if s.fits]
        failed = [s for s in group if not s.fits]
        budget = f", budget {choice.budget_bytes / GiB:.1f} GiB" if choice.budget_bytes else ""
        ax.set_title(f"{choice.workload} · {choice.env_id} · {figures_kind(choice)}{budget}", fontsize=9)
        if not fitting:
            ax.text(0.5, 0.5, "nothing fits", ha="center", va="center", transform=ax.transAxes)
        elif choice.simulated or all(s.throughput is None for s in fitting):
            _bars(ax, fitting, choice)
        else:
            _scatter(ax, fitting, choice)
        caption = _caption(failed)
        if caption and (legend := ax.get_legend()) is not None:   # under the axis, with the legend: in the layout
            legend.set_title(caption, prop={"size": 7})
            legend.get_title().set_color("tab:red")
            legend._legend_box.align = "left"
        elif caption:
            ax.annotate(caption, (0, -0.14), xycoords="axes fraction", va="top", fontsize=7, color="tab:red")
    if not choices:
        axes[0].text(0.5, 0.5, "no results", ha="center", va="center", transform=axes[0].transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
    return path
