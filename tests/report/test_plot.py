"""The plots drawn from committed H200 sweeps, a simulated one and a comparison: lines for the allocated floor, the
budget and the device's memory, each labelled; labels that cross neither an error bar nor each other nor another
point, each with its figure; a mark for settings that took (nearly) the whole card; the legend outside the data;
and a y axis from zero when one repeat gives no interval."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

import alloctune
from alloctune.decide.choice import choose
from alloctune.decide.summary import summarize_settings
from alloctune.api.compare import compare_folders
from alloctune.report.analysis import choice_record
from alloctune.report.compare_output import comparison_figure
from alloctune.report.plot import WHOLE_CARD, _bars, _scatter, plot_pareto
from alloctune.results.folder import ResultsFolder, find_results
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.units import GiB

RESULTS = Path(__file__).resolve().parents[2] / "results"
ONE_REPEAT = RESULTS / "cnn-varres-h200-20261129-235416"
THREE_REPEATS = RESULTS / "transformer-varlen-h200-20261129-234646"   # max_split_size_mb:128 and :512 fill the card
VARLEN = RESULTS.parent / "workloads" / "transformer-varlen.yaml"
DEVICE = "device memory 139.80 GiB"


def draw(folder, budget_bytes=None, trials=None):
    settings = summarize_settings(trials if trials is not None else ResultsFolder(folder).trials())
    [choice] = [choice_record(c) for c in choose(settings)]   # the record the plot is drawn from
    if budget_bytes:
        choice = replace(choice, budget_bytes=budget_bytes)
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    fitting = [choice.figures(s.conf) for s in settings if s.fits]
    (_bars if choice.simulated else _scatter)(ax, fitting, choice)
    fig.canvas.draw()
    return ax, fitting


def vlines(ax):
    return {line.get_label(): line.get_xdata()[0] for line in ax.get_lines() if line.get_label().startswith(("peak", "budget"))}


def legend_outside(ax) -> bool:
    """The legend's box shares no pixel with the data's."""
    renderer = ax.figure.canvas.get_renderer()
    return not ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_the_device_line_the_whole_card_marks_and_a_figure_on_every_label():
    ax, fitting = draw(THREE_REPEATS)
    assert [line.get_xdata()[0] for line in ax.get_lines() if line.get_label() == DEVICE] == [150109880320 / GiB]
    rings = [line for line in ax.get_lines() if line.get_markeredgecolor() == WHOLE_CARD["color"]]
    assert len(rings) == 2 and [r.get_label() for r in rings].count(WHOLE_CARD["label"]) == 1   # named once
    texts = [t.get_text() for t in ax.texts]
    # cudaMallocAsync is in the grid: every setting at its peak device memory, as the table compares them
    assert ax.get_xlabel() == "peak device memory (GiB)"
    assert "max_split_size_mb:128 · 139.78 GiB · whole card" in texts
    assert "chosen: expandable_segments:True · 27.64 GiB" in texts
    assert sum("whole card" in t for t in texts) == 2 and all(" GiB" in t for t in texts)
    assert legend_outside(ax)


def test_a_limit_far_off_the_data_is_named_not_drawn():
    ax, _ = draw(ONE_REPEAT, budget_bytes=10_000 * GiB)
    off = [line for line in ax.get_lines() if line.get_label().endswith("(off the scale)")]
    assert {line.get_label() for line in off} == {"budget 10000.00 GiB (off the scale)"}
    assert all(len(line.get_xdata()) == 0 for line in off) and ax.get_xlim()[1] < 1000


def test_a_simulated_sweep_draws_bars_with_their_figures_and_hatches_the_whole_card(tmp_path):
    outcome = alloctune.sweep(VARLEN, preset="h200", grid=["expandable_segments:True", "max_split_size_mb:128"],
                              results_root=tmp_path, backend="sim")
    ax, fitting = draw(None, trials=outcome.folder.trials())
    bars = ax.patches
    assert len(bars) == len(fitting) == 3
    assert [bar.get_hatch() for bar in bars] == [None, None, "//"]   # default, expandable segments, max split
    assert [t.get_text() for t in ax.texts] == [" 37.60 GiB", " 26.87 GiB", " 139.04 GiB · whole card"]
    assert DEVICE in [line.get_label() for line in ax.get_lines()] and legend_outside(ax)
    assert WHOLE_CARD["label"] in [t.get_text() for t in ax.get_legend().get_texts()]
    png = plot_pareto([choice_record(c) for c in outcome.choices], tmp_path / "plot.png")
    assert png.stat().st_size > 10_000


def test_compare_png_labels_each_bar_and_draws_the_limits():
    comparison = compare_folders(find_results(RESULTS / "torch-2.1-vs-2.13-sim" / "transformer-varlen-h200"))
    fig = comparison_figure(comparison)
    fig.canvas.draw()
    [ax] = fig.axes
    labels = {line.get_label() for line in ax.get_lines()}
    assert {DEVICE, "budget 139.80 GiB"} <= labels
    texts = [t.get_text() for t in ax.texts]
    assert "139.0" in texts and "139.0 =" in texts and "31.7" in texts and "37.6 −" in texts   # figure and mark
    assert sum(bar.get_hatch() == "//" for bar in ax.patches) == 2   # max_split_size_mb:128 in both columns
    assert legend_outside(ax)


def test_floor_and_budget_lines():
    ax, fitting = draw(THREE_REPEATS, budget_bytes=40 * GiB)
    lines = vlines(ax)
    floor = min(s.peak_allocated_bytes for s in fitting) / GiB
    assert lines == {f"peak allocated {floor:.2f} GiB (the floor)": floor, "budget 40.00 GiB": 40.0}


def test_labels_cross_no_error_bar_and_no_other_label():
    for folder in (ONE_REPEAT, THREE_REPEATS):
        ax, fitting = draw(folder)
        renderer = ax.figure.canvas.get_renderer()
        labels = [Text.get_window_extent(t, renderer) for t in ax.texts]
        assert len(labels) == len(fitting)
        for i, box in enumerate(labels):
            assert not any(box.overlaps(other) for other in labels[i + 1:]), folder.name
        # Error bars are vertical lines at each point's x: a label starts right of its own.
        for text, box in zip(ax.texts, labels):
            x_bar = ax.transData.transform(text.xy)[0]
            assert box.x0 > x_bar


def test_one_repeat_starts_the_y_axis_at_zero():
    assert draw(ONE_REPEAT)[0].get_ylim()[0] == 0
    assert draw(THREE_REPEATS)[0].get_ylim()[0] > 0   # with intervals the axis follows the data


def test_with_cudamallocasync_in_the_group_the_axis_is_the_device_memory_the_table_compares():
    """cudaMallocAsync's reserved figure is its driver pool's and not comparable: the group compares the peak device
    memory, and the plot places, labels and fronts every setting by it, as the table does. By reserved (30 GiB
    against expandable segments' 30.5), cudaMallocAsync would sit leftmost and alone on the front."""
    rows = {"": (40, 41, 100), "expandable_segments:True": (30.5, 31, 100),
            "backend:cudaMallocAsync": (30, 31.5, 110)}
    records = [TrialRecord("w", "h1", conf, repeat, "torch-2.11.0", "cuda", TrialState.OK, Measurement(
        peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=29 * GiB,
        device_peak_used_bytes=int(device * GiB), throughput=tput + repeat, unit="tokens"))
        for repeat in range(2) for conf, (reserved, device, tput) in rows.items()]
    ax, _ = draw(None, trials=records)
    assert ax.get_xlabel() == "peak device memory (GiB)"
    texts = [t.get_text() for t in ax.texts]
    assert "backend:cudaMallocAsync · 31.50 GiB" in texts and "default · 41.00 GiB" in texts
    assert sorted(t.xy[0] for t in ax.texts) == [31, 31.5, 41]
    [front] = [line for line in ax.get_lines() if line.get_label().startswith("Pareto front")]
    assert list(front.get_xdata()) == [31, 31.5]
