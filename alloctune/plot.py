"""The Pareto plot: peak reserved against throughput per setting, one panel per (environment, backend, budget).

Drawn on a bare `Figure` (Agg canvas), never through pyplot, so it changes no global backend state and needs no
display.
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Iterable

from matplotlib.figure import Figure

from .select import Choice, SettingResult, pareto_front, ranked
from .units import GiB

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


def _scatter(ax, fitting: list[SettingResult], choice: Choice) -> None:
    points = [s for s in fitting if s.throughput is not None]
    for s in points:
        t = s.throughput
        err = None
        if t.ci_low is not None:
            err = [[max(t.median - t.ci_low, 0)], [max(t.ci_high - t.median, 0)]]
        marker, color = ("*", "tab:green") if s is choice.best else (("s", "tab:gray") if s.is_default
                                                                      else ("o", "tab:blue"))
        ax.errorbar(s.peak_reserved_bytes / GiB, t.median, yerr=err, fmt=marker, color=color,
                    markersize=12 if s is choice.best else 6, capsize=3)
        important = s is choice.best or s.is_default
        ax.annotate(_role(s, choice), (s.peak_reserved_bytes / GiB, t.median), textcoords="offset points",
                    xytext=(5, 5), fontsize=8 if important else 6, fontweight="bold" if important else "normal")
    front = pareto_front(points)
    if front:
        ax.step([s.peak_reserved_bytes / GiB for s in front], [s.throughput.median for s in front],
                where="post", color="tab:orange", linestyle="--", marker="o", markersize=15, markerfacecolor="none",
                label="Pareto front (less memory, more throughput)")
        ax.legend(fontsize=7, loc="lower right")
    unit = next((s.unit for s in points if s.unit), "units")
    ax.set_xlabel("peak reserved (GiB)")
    ax.set_ylabel(f"throughput ({unit}/s), median and 95% CI")


def _bars(ax, fitting: list[SettingResult], choice: Choice) -> None:
    # Retries are why a smaller simulated setting can lose: show them beside the name.
    labels = [_role(s, choice) + (f" ({s.num_alloc_retries} retries)" if s.num_alloc_retries else "")
              for s in fitting]
    colors = ["tab:green" if s is choice.best else "tab:gray" if s.is_default else "tab:blue" for s in fitting]
    ax.barh(range(len(fitting)), [s.peak_reserved_bytes / GiB for s in fitting], color=colors)
    ax.set_yticks(range(len(fitting)), labels, fontsize=7)
    ax.invert_yaxis()  # lowest peak on top, as in the ranked table
    ax.set_xlabel("peak reserved (GiB)" + (", simulated" if choice.simulated else ""))


def plot_pareto(settings: Iterable[SettingResult], choices: list[Choice], path: str | os.PathLike) -> Path:
    """Write the PNG and return its path. Groups without throughput (simulated) get a bar chart of peak reserved."""
    settings, path = list(settings), Path(path)
    panels = max(len(choices), 1)
    fig = Figure(figsize=(7 * panels, 5.5))
    axes = fig.subplots(1, panels, squeeze=False)[0]
    for ax, choice in zip(axes, choices):
        group = ranked(s for s in settings if s.group == (choice.env_id, choice.backend, choice.budget_bytes))
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
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path
