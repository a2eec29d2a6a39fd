"""Inputs whose size says little of what they hold (issue 38): a snapshot that lists one segment thousands of times, a
trace whose metadata holds millions of runs or repeats one warning, a grid file of millions of settings, a fleet of
traces of millions of events. Each is refused in one line before what it declares is expanded, or read within
bounded time and memory; a fleet holds one job's trace at a time."""
from __future__ import annotations

import lzma
import pickle

import pytest
from bounded import bounded_cli, one_line_error
from test_hostile_traces import SECONDS, allocations, entry, refused_everywhere

from alloctune.sim.captures import MAX_OPEN_CAPTURES
from alloctune.sim.limits import MAX_MEASURED, MAX_WARNINGS, MIN_ITEM_BYTES
from alloctune.settings.grid import MAX_GRID_SETTINGS
from alloctune.results.typed import MAX_PLAIN_VALUES

MiB = 1 << 20
TRACE = "workloads/traces/hpsearch-h200.xz"


def shared_segments(segments: int, blocks: int) -> dict:
    """A snapshot whose one segment of `blocks` blocks (one block, repeated) is listed `segments` times."""
    block = {"address": 0, "size": MiB, "requested_size": MiB, "state": "active_allocated"}
    segment = {"device": 0, "address": 0, "total_size": blocks * MiB, "allocated_size": blocks * MiB, "stream": 0,
               "segment_type": "large", "blocks": [block] * blocks}
    return {"segments": [segment] * segments, "device_traces": [[entry(1, MiB), entry(2, MiB)]]}


def test_a_snapshot_listing_one_segment_thousands_of_times_is_refused_at_once(tmp_path):
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps(shared_segments(3000, 3000)))   # 9 M blocks in 12 KB
    assert path.stat().st_size < 16_000
    said = f"lists more segments, blocks and trace entries than one for every {MIN_ITEM_BYTES} of its"
    for command in ("diagnose", "replay"):
        assert said in one_line_error(bounded_cli(command, path, timeout=SECONDS))
    entries = tmp_path / "entries.pickle"   # the same entry 2 M times: 4 MB for what would be 2 M events
    entries.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry(1, MiB)] * 2_000_000]}))
    for error in refused_everywhere(entries, tmp_path, sweep=False):
        assert said in error


def test_a_snapshot_whose_metadata_repeats_a_list_by_reference_is_refused(tmp_path):
    node: list = []
    for _ in range(40):   # 2^40 lists in 300 bytes
        node = [node, node]
    path = tmp_path / "tree.pickle"
    path.write_bytes(pickle.dumps({**shared_segments(1, 1), "alloctune": {"env": {"x": node}}}))
    for command in ("diagnose", "replay"):
        error = one_line_error(bounded_cli(command, path, timeout=SECONDS))
        assert f"field 'alloctune': holds more than {MAX_PLAIN_VALUES:,} values" in error


def test_captures_begun_by_the_thousand_and_never_ended_are_refused(tmp_path):
    """Each entry is routed by a search of the captures underway: 20,000 of them made a 1.3 MB snapshot's load take
    hours."""
    begun = [{"time_us": i, "action": "begin", "pool": [1, i], "stream": 7} for i in range(20_000)]
    path = tmp_path / "captures.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry(k, MiB, time_us=30_000 + k)
                                                                      for k in range(10)]],
                                   "alloctune": {"pool_events": begun}}))
    for error in refused_everywhere(path, tmp_path, sweep=False):
        assert f"more than {MAX_OPEN_CAPTURES} CUDA graph captures underway at once" in error


def test_a_trace_whose_metadata_lists_millions_of_runs_is_refused_before_reading_them(tmp_path):
    many = tmp_path / "runs.xz"   # 6 M empty runs in under 4 KB: refused from the header's length
    many.write_bytes(allocations([MiB, 2 * MiB], {"measured": [{}] * 6_000_000}))
    assert many.stat().st_size < 5000
    for error in refused_everywhere(many, tmp_path):
        assert f"its header holds more than the {MAX_PLAIN_VALUES:,} values" in error
    some = tmp_path / "some.xz"   # fewer than that, still more runs than a trace holds: counted before any is read
    some.write_bytes(allocations([MiB, 2 * MiB], {"measured": [{}] * (MAX_MEASURED + 1)}))
    for error in refused_everywhere(some, tmp_path, sweep=False):
        assert f"meta 'measured' lists {MAX_MEASURED + 1:,} runs, more than the {MAX_MEASURED:,}" in error
    lists = tmp_path / "lists.xz"   # 21 M empty lists, 1.5 GB once parsed: counted first
    lists.write_bytes(lzma.compress(b'{"format": "alloctune-trace", "version": 3, "meta": {"x": ['
                                    + b"[]," * 21_000_000 + b"[]]}}\n"))
    for error in refused_everywhere(lists, tmp_path, sweep=False):
        assert "its header holds more than" in error


def test_a_warning_repeated_half_a_million_times_is_said_once_with_its_count(tmp_path):
    path = tmp_path / "warn.xz"
    path.write_bytes(allocations([MiB, 2 * MiB], {"warnings": ["the same warning"] * 500_000
                                                  + [f"warning {i}" for i in range(MAX_WARNINGS + 5)]}))
    run = bounded_cli("replay", path, "--conf", "expandable_segments:True", timeout=SECONDS)
    assert run.returncode == 0, run.stderr
    said = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("warning: ")]
    assert said[0] == "warning: the same warning (500,000 times)"
    assert "warning: and 6 other warnings in the trace's metadata" in said
    assert len(said) < MAX_WARNINGS + 6


def test_a_grid_file_of_millions_of_settings_is_refused_before_any_is_made(tmp_path):
    keys = ["max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
            "max_non_split_rounding_mb", "large_segment_size_mb", "pinned_num_register_threads",
            "release_lock_on_cudamalloc", "pinned_use_cuda_host_register"]
    grid = tmp_path / "grid.yaml"   # 8 keys of 8 values: 16.8 M settings
    grid.write_text("- {" + ", ".join(f"{k}: [{', '.join(str(2 ** i) for i in range(1, 9))}]" for k in keys) + "}\n")
    assert grid.stat().st_size < 1600
    out = tmp_path / "results"
    for args in (["replay", TRACE], ["fleet", TRACE], ["sweep", "workloads/hpsearch.yaml", "--preset", "h200",
                                                       "--backend", "sim", "--out", out]):
        error = one_line_error(bounded_cli(*args, "--grid", grid, timeout=2 * SECONDS))
        assert f"the grid lists more than {MAX_GRID_SETTINGS:,} settings" in error
    assert not out.exists()


@pytest.mark.slow
def test_a_fleet_holds_one_jobs_trace_at_a_time(tmp_path):
    """Four traces of 2 M events (5 KB each), each about 450 MB once loaded: all four held at once passed the 1 GiB
    of address space that bounded_cli gives; one at a time they fit."""
    paths = []
    for i in range(4):
        paths.append(tmp_path / f"job{i}.xz")
        paths[-1].write_bytes(allocations([512 * (1 + (j + i) % 7) for j in range(2_000_000)]))
    run = bounded_cli("fleet", *paths, "--jobs", "1", "--conf", "default", "--conf", "expandable_segments:True",
                      timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    assert all(f"job{i}" in run.stdout for i in range(4))
