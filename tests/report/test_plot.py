"""The Pareto plot drawn from committed H200 sweeps: a line for the allocated floor and one for the budget, labels
that cross neither an error bar nor each other, and a y axis from zero when one repeat gives no interval."""
from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from alloctune.decide.choice import choose
from alloctune.decide.summary import summarize_settings
from alloctune.report.plot import _bars, _scatter
from alloctune.results.folder import ResultsFolder
from alloctune.units import GiB

RESULTS = Path(__file__).resolve().parents[2] / "results"
ONE_REPEAT = RESULTS / "cnn-varres-h200-20261129-235416"
THREE_REPEATS = RESULTS / "transformer-varlen-h200-20261129-234646"


def draw(folder, budget_bytes=None):
    settings = summarize_settings(ResultsFolder(folder).trials())
    [choice] = choose(settings)
    if budget_bytes:
        choice = choice.__class__(**{**choice.__dict__, "budget_bytes": budget_bytes})
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    fitting = [s for s in settings if s.fits]
    (_bars if choice.simulated else _scatter)(ax, fitting, choice)
    fig.canvas.draw()
    return ax, fitting


def vlines(ax):
    return {line.get_label(): line.get_xdata()[0] for line in ax.get_lines() if line.get_label().startswith(("peak", "budget"))}


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
