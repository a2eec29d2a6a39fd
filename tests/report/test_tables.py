"""Output of sweep, replay, report and compare within 100 columns (80 and piped too): a setting name never breaks,
and columns with nothing to say (throughput in a simulated sweep) are left out."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HPSEARCH = ROOT / "workloads" / "hpsearch.yaml"
TRACE = ROOT / "workloads" / "traces" / "hpsearch-h200.xz"
LONGEST = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
GRID = ["--conf", "expandable_segments:True", "--conf", LONGEST]
MEASURED = ROOT / "results" / "transformer-varlen-h200-20261129-234646"   # 3 repeats, flags, every column
SETTINGS = ["expandable_segments:True", LONGEST, "default"]


def run(columns, *args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def check(text, width, settings=SETTINGS):
    # Paths and commands to copy are printed whole, on purpose (a folded command cannot be pasted).
    lines = [line for line in text.splitlines() if not line.startswith(("wrote ", "Results:", "Next:", "Confirm"))]
    assert max(len(line) for line in lines) <= width, "\n".join(line for line in lines if len(line) > width)
    for name in settings:   # whole on some table line, never split over two
        assert any(f" {name} " in f" {line} " for line in lines), name


@pytest.mark.parametrize("columns", [80, 100, None])   # None: piped, no COLUMNS: 100
def test_report_and_replay_fit_and_never_break_a_setting(tmp_path, columns):
    width = columns or 100
    folder = shutil.copytree(MEASURED, tmp_path / MEASURED.name)
    check(run(columns, "report", folder), width)
    check(run(columns, "replay", TRACE, *GRID, *(["--min-memory"] if columns == 100 else []), "--jobs", "1"), width)


@pytest.mark.slow
@pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU fallback, on any machine
def test_a_simulated_sweep_fits_100_columns_without_empty_throughput_columns(tmp_path):
    out = run(100, "sweep", HPSEARCH, "--preset", "h200", *GRID, "--results", tmp_path)
    check(out, 100)
    assert "/s" not in out.split("Results:")[0].replace("tokens/s", "") and "tokens" not in out
    assert "vs" not in out.split("Results:")[0].split()   # no throughput, so no comparison column


def test_compare_fits_100_columns(tmp_path):
    out = run(100, "compare", ROOT / "results" / "torch-2.1-vs-2.13-sim" / "transformer-varlen-h200",
              "-o", tmp_path)
    check(out, 100, ["expandable_segments:True", "garbage_collection_threshold:0.2", "default"])
