"""`alloctune replay` as a user runs it: a GPU measurement stands only beside a prediction made under the same
conditions, and rows that hit OOM are marked under a title that says what the mark means."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARLEN_TRACE = ROOT / "workloads" / "traces" / "transformer-varlen-h200.xz"
GRID = ["--conf", "expandable_segments:True", "--conf", "max_split_size_mb:128"]


def replay(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "alloctune", "replay", str(VARLEN_TRACE), *GRID, *args],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_measured_figures_stand_only_beside_predictions_under_the_same_conditions():
    rows = {r["conf"]: r for r in json.loads(replay("--json"))["results"]}
    # The H200 sweep, unbudgeted on the recording card: 139.04 GiB measured for max_split_size_mb:128.
    assert rows["max_split_size_mb:128"]["measured_peak_reserved_bytes"] == 149294153728
    budgeted = json.loads(replay("--json", "--budget", "30GiB"))["results"]
    assert budgeted and not any("measured_peak_reserved_bytes" in r for r in budgeted)
    smaller = json.loads(replay("--json", "--device-memory", "80GiB"))["results"]
    assert not any("measured_peak_reserved_bytes" in r for r in smaller)
    text = replay("--budget", "30GiB")
    assert "GPU =" not in text and "GPU =" in replay()   # the caption of the measured column
    assert "3 GPU measurements of these settings in the trace are not shown" in " ".join(text.split())


def test_rows_with_ooms_are_marked_and_the_title_says_so():
    text = replay("--budget", "30GiB", "--conf", "default")
    assert "OOM = does not fit under this budget" in text
    default_row = next(line for line in text.splitlines() if " default " in line)
    assert default_row.split()[0] == "OOM"        # the default overflows 30 GiB; expandable segments fits
    fitting = next(line for line in text.splitlines() if "expandable_segments:True" in line)
    assert fitting.split()[0] == "1"



def test_driver_work_per_steady_step_is_shown_and_in_the_json(tmp_path):
    """A trace whose step i allocates (60 + 10 i) MiB: the default cudaMallocs once a steady step (80-110 MiB in
    steps 2-5); without step marks the same trace is counted over the whole run, and the table says so."""
    from alloctune.sim.trace import ALLOC, FREE, Trace, save_trace

    MiB = 2**20
    sizes = [s for i in range(6) for s in [(60 + 10 * i) * MiB] * 2]
    marked = Trace([ALLOC, FREE] * 6, [i // 2 for i in range(12)], sizes, [0] * 12,
                   meta={"step_ends": list(range(2, 13, 2)), "warmup_steps": 2})
    save_trace(marked, tmp_path / "marked.xz")
    save_trace(Trace(marked.kinds, marked.addrs, sizes, marked.streams), tmp_path / "unmarked.xz")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")

    def run(name, *args):
        proc = subprocess.run([sys.executable, "-m", "alloctune", "replay", str(tmp_path / name), "--conf", "default",
                               *args], capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    (row,) = [r for r in json.loads(run("marked.xz", "--json"))["results"] if r["conf"] == "default"]
    assert row["driver_work"] == {"steps": 4, "device_allocs": 1.0, "device_alloc_bytes": 95.0 * MiB,
                                  **{k: 0.0 for k in ("device_frees", "device_free_bytes", "maps", "map_bytes",
                                                      "unmaps", "unmap_bytes", "syncs", "alloc_retries",
                                                      "gc_passes")}, "whole_run": False}
    text = " ".join(run("marked.xz").split())
    assert "/step" in text and "replayed per steady step (4 after the warm-up)" in text
    # the cache grows every step (each request outgrows the block freed before it): its peak comes in the last
    assert row["steps_before_peak"] == 5 and "peak reserved first reached in step 6 of 6 under every setting" in text
    text = " ".join(run("unmarked.xz").split())
    assert "/run" in text and "/step" not in text and "replayed over the whole run: the trace marks no steady step" in text
    assert "peak reserved first reached" not in text


def test_a_setting_not_simulated_keeps_its_gpu_measurement_in_the_json(tmp_path):
    """cudaMallocAsync, measured on the GPU but never simulated: the table's GPU column shows its figure, and the
    JSON's skipped entry holds it under the name a result's measured figure has; under other conditions, neither."""
    from alloctune.sim.trace import ALLOC, FREE, Trace, save_trace

    MiB = 2**20
    measured = {"conf": "backend:cudaMallocAsync", "peak_reserved_bytes": 96 * MiB}
    trace = Trace([ALLOC, FREE], [0, 0], [64 * MiB, 64 * MiB], [0, 0],
                  meta={"device_total_bytes": 80 * 2**30, "measured": [measured]})
    save_trace(trace, tmp_path / "t.xz")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")

    def run(*args):
        proc = subprocess.run([sys.executable, "-m", "alloctune", "replay", str(tmp_path / "t.xz"), "--conf",
                               "backend:cudaMallocAsync", *args], capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    (row,) = [s for s in json.loads(run("--json"))["skipped"] if s["conf"] == "backend:cudaMallocAsync"]
    assert row["measured_peak_reserved_bytes"] == 96 * MiB and row["reason"]
    assert "96.00" in next(line for line in run().splitlines() if "backend:cudaMallocAsync" in line)
    (row,) = [s for s in json.loads(run("--json", "--budget", "1GiB"))["skipped"]
              if s["conf"] == "backend:cudaMallocAsync"]
    assert "measured_peak_reserved_bytes" not in row


def test_where_the_peak_came_is_said_once_where_every_setting_agrees_and_grouped_where_not():
    from alloctune.report.replay import peak_steps_line

    assert peak_steps_line([("", 1), ("expandable_segments:True", 1)], 70) == \
        "peak reserved first reached in step 2 of 70 under every setting"
    assert peak_steps_line([("", 65), ("expandable_segments:True", 65), ("max_split_size_mb:128", 70)], 70) == \
        ("peak reserved first reached: in step 66 of 70 for default, expandable_segments:True; in the teardown, "
         "after the last of 70 steps for max_split_size_mb:128")
    assert peak_steps_line([("", None), ("expandable_segments:True", 3)], 10) == \
        "peak reserved first reached in step 4 of 10 under every setting replayed to its end"
    assert peak_steps_line([("", None)], 10) is None and peak_steps_line([("", 2)], 0) is None
