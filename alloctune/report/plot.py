"""The Pareto plot: peak reserved against throughput per setting, one panel per (environment, backend, budget).

Drawn on a bare `Figure` (Agg canvas), never through pyplot, so it changes no global backend state and needs no
display.
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Iterable

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from ..decide.choice import Choice, SettingResult, pareto_front, ranked
from ..files import write_file
from ..results.records import decision_group
from ..units import GiB

PLOT_FILE = "plot.png"


def _caption(failed: list[SettingResult]) -> str:
    if not failed:
        return ""
    text = "failed: " + ", ".join(f"{s.label} ({s.state} {s.failed_repeats}/{len(s.trials)})" for s in failed)
    return textwrap.fill(text, 90)


def _role(s: SettingResult, choice: Choice) -> str:
    if s is choice.best:
        return f"chosen: {s.label}"
    return "default" if s.is_default else s.label


def _gib(value: int | None) -> float:
    return (value or 0) / GiB


def _scatter(ax, fitting: list[SettingResult], choice: Choice) -> None:
    # The chosen setting and the default are labelled first, so that others give way to them (_unoverlap).
    points = sorted(((s, s.throughput) for s in fitting if s.throughput is not None),
                    key=lambda p: (p[0] is not choice.best, not p[0].is_default))
    labels = []
    for s, t in points:
        err = None
        if t.ci_low is not None and t.ci_high is not None:
            err = [[max(t.median - t.ci_low, 0)], [max(t.ci_high - t.median, 0)]]
        marker, color = ("*", "tab:green") if s is choice.best else (("s", "tab:gray") if s.is_default
                                                                      else ("o", "tab:blue"))
        ax.errorbar(_gib(s.peak_reserved_bytes), t.median, yerr=err, fmt=marker, color=color,
                    markersize=12 if s is choice.best else 6, capsize=3)
        important = s is choice.best or s.is_default
        # Right of the marker, centred on it: the error bar is vertical, so the label never crosses it.
        labels.append(ax.annotate(
            _role(s, choice), (_gib(s.peak_reserved_bytes), t.median), textcoords="offset points", xytext=(12, 0),
            ha="left", va="center", fontsize=8 if important else 6, fontweight="bold" if important else "normal",
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            arrowprops={"arrowstyle": "-", "color": "0.6", "linewidth": 0.5, "shrinkA": 0, "shrinkB": 4}))
    front = pareto_front([s for s, _ in points])
    if front:
        ax.step([_gib(s.peak_reserved_bytes) for s in front], [s.throughput.median for s in front if s.throughput],
                where="post", color="tab:orange", linestyle="--", marker="o", markersize=15, markerfacecolor="none",
                label="Pareto front (less memory, more throughput)")
    _memory_lines(ax, fitting, choice)
    with_ci = any(t.ci_low is not None for _, t in points)
    if not with_ci:
        # One repeat: no interval to show, and an axis cut near the data would make small differences look large.
        ax.set_ylim(bottom=0, top=max(t.median for _, t in points) * 1.1)
    ax.legend(fontsize=7, loc="lower right")
    _unoverlap(ax, labels)
    unit = next((s.unit for s, _ in points if s.unit), "units")
    ax.set_xlabel("peak reserved (GiB)")
    ax.set_ylabel(f"throughput ({unit}/s), " + ("median and 95% CI" if with_ci else "one repeat"))


def _unoverlap(ax, labels: list) -> None:
    """Move a label down, step by step, while it overlaps one placed before it (a thin line keeps it tied to its
    point). Points of close settings sit close together; their names must not print over each other."""
    renderer = ax.figure.canvas.get_renderer()

    def text_box(label):   # the text alone: an Annotation's own extent also covers its (growing) line
        label.update_positions(renderer)   # an offset moved since the last draw takes effect here
        return Text.get_window_extent(label, renderer)

    placed: list = []
    for label in labels:
        step = text_box(label).height * 72 / ax.figure.dpi + 1   # one line, in points
        for _ in range(8):
            if not any(text_box(label).overlaps(other) for other in placed):
                break
            x, y = label.xyann   # offset from the marker, in points
            label.xyann = (x, y - step)
        placed.append(text_box(label))


def _memory_lines(ax, fitting: list[SettingResult], choice: Choice) -> None:
    """Vertical lines on the peak-reserved axis: the memory the tensors needed (no setting reserves less) and the
    budget every trial ran under."""
    floor = min((s.peak_allocated_bytes for s in fitting if s.peak_allocated_bytes), default=0)
    if floor:
        ax.axvline(floor / GiB, color="black", linestyle=":", linewidth=1,
                   label=f"peak allocated {floor / GiB:.2f} GiB (the floor)")
    if choice.budget_bytes:
        ax.axvline(choice.budget_bytes / GiB, color="tab:red", linestyle="-.", linewidth=1,
                   label=f"budget {choice.budget_bytes / GiB:.2f} GiB")


def _bars(ax, fitting: list[SettingResult], choice: Choice) -> None:
    # Retries are why a smaller simulated setting can lose: show them beside the name.
    labels = [_role(s, choice) + (f" ({s.num_alloc_retries} retries)" if s.num_alloc_retries else "")
              for s in fitting]
    colors = ["tab:green" if s is choice.best else "tab:gray" if s.is_default else "tab:blue" for s in fitting]
    ax.barh(range(len(fitting)), [_gib(s.peak_reserved_bytes) for s in fitting], color=colors)
    ax.set_yticks(range(len(fitting)), labels, fontsize=7)
    ax.invert_yaxis()  # lowest peak on top, as in the ranked table
    _memory_lines(ax, fitting, choice)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("peak reserved (GiB)" + (", simulated" if choice.simulated else ""))


def plot_pareto(settings: Iterable[SettingResult], choices: list[Choice], path: str | os.PathLike) -> Path:
    """Write the PNG and return its path. Groups without throughput (simulated) get a bar chart of peak reserved."""
    settings, path = list(settings), Path(path)
    panels = max(len(choices), 1)
    fig = Figure(figsize=(7 * panels, 5.5))
    FigureCanvasAgg(fig)   # a renderer to measure labels with (_unoverlap)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    for ax, choice in zip(axes, choices):
        group = ranked(s for s in settings if s.group == decision_group(choice))
        fitting = [s for s in group if s.fits]
        failed = [s for s in group if not s.fits]
        budget = f", budget {choice.budget_bytes / GiB:.1f} GiB" if choice.budget_bytes else ""
        ax.set_title(f"{choice.workload} · {choice.env_id} · {choice.backend}{budget}", fontsize=9)
        if not fitting:
            ax.text(0.5, 0.5, "nothing fits", ha="center", va="center", transform=ax.transAxes)
        elif choice.simulated or all(s.throughput is None for s in fitting):
            _bars(ax, fitting, choice)
        else:
            _scatter(ax, fitting, choice)
        caption = _caption(failed)
        if caption:
            ax.annotate(caption, (0, -0.14), xycoords="axes fraction", va="top", fontsize=7, color="tab:red")
    if not choices:
        axes[0].text(0.5, 0.5, "no results", ha="center", va="center", transform=axes[0].transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
    return path
