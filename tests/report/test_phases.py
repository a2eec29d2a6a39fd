"""Long work says what it is doing: every phase of a sweep is named as it starts, the trial count is known when
the bar appears (no '0/?' then a jump), and nothing is drawn before an error in the user's input."""
from __future__ import annotations

from pathlib import Path

import pytest

import alloctune
from clirun import in_process

ROOT = Path(__file__).resolve().parents[2]
HPSEARCH = ROOT / "workloads" / "hpsearch.yaml"

pytestmark = pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU fallback, on any machine


@pytest.mark.slow
def test_a_simulated_sweep_names_each_phase_and_counts_from_the_start(tmp_path):
    phases, counts = [], []
    alloctune.sweep(HPSEARCH, preset="h200", grid=["expandable_segments:True", "max_split_size_mb:128"],
                    results_root=tmp_path, phase=lambda name, count: phases.append((name, count)),
                    progress=lambda record, done, total: counts.append((done, total)))
    names = [name for name, _ in phases]
    assert names == ["probing 1 Python interpreter", "loading the allocation trace",
                     "checking 3 settings as the torch they run or replay under", "replaying settings",
                     "choosing and writing the reports"]
    assert dict(phases)["replaying settings"] == (0, 3)       # the bar starts with its total
    assert counts == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.slow
def test_no_progress_is_drawn_before_an_input_error(tmp_path):
    for args in (["sweep", tmp_path / "missing.yaml"],
                 ["sweep", HPSEARCH, "--preset", "h200", "--conf", "expandable_segment:True"],
                 ["sweep", HPSEARCH, "--preset", "h200", "--trace", ROOT / "workloads/traces/detection-h200.xz"]):
        proc = in_process(*args, "--results", tmp_path / "r")   # stderr is no terminal, as in a fresh interpreter
        assert proc.returncode == 2
        lines = proc.stderr.splitlines()
        assert lines[-1].startswith("alloctune: error:") and "━" not in proc.stderr, proc.stderr
        assert sum("error" in line for line in lines) == 1
