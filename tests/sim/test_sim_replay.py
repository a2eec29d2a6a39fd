"""Replay over a grid (in-process and over worker processes), capacity planning, and `alloctune replay`."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import in_process

from alloctune.settings.conf import AllocConf
from alloctune.sim.replay import (
    DEFAULT_OVERHEAD,
    Capacity,
    ReplayOutcome,
    _smallest,
    min_memory,
    min_memory_many,
    no_retry_is_unlimited_peak,
    replay,
    replay_many,
)
from alloctune.sim.simulate import core_notice, pack, simulate
from alloctune.sim.trace import ALLOC, FREE, Trace, load_trace, save_trace

MiB = 2**20
H200 = 143771 * MiB


def ops(*steps) -> Trace:
    """Trace from ('a', id, size) / ('f', id) steps on stream 0."""
    kinds, addrs, sizes, live = [], [], [], {}
    for step in steps:
        if step[0] == "a":
            live[step[1]] = step[2]
            kinds.append(ALLOC), addrs.append(step[1]), sizes.append(step[2])
        else:
            kinds.append(FREE), addrs.append(step[1]), sizes.append(live.pop(step[1]))
    # Nothing outside the allocator, so that the hand-worked answers are in round numbers.
    return Trace(kinds, addrs, sizes, [0] * len(kinds), meta={"overhead_bytes": 0})


# 60 MiB, freed, then 80 MiB: unlimited, the cached 60 MiB segment is too small and a second one is made
# (140 MiB reserved). On an 80 MiB device the 80 MiB request fails, the cache is released and the retry fits.
GROW = ops(("a", 0, 60 * MiB), ("f", 0), ("a", 1, 80 * MiB), ("f", 1))


def test_replay_grid_keeps_order_and_marks_async():
    confs = ["", "expandable_segments:True", "backend:cudaMallocAsync", "max_split_size_mb:128"]
    outcomes = replay(GROW, confs, H200, jobs=1)
    assert [o.conf for o in outcomes] == ["default", "expandable_segments:True", "backend:cudaMallocAsync",
                                          "max_split_size_mb:128"]
    default, _, not_simulated, _ = outcomes
    assert default.simulated and default.fits
    assert default.result.peak_reserved_bytes == 140 * MiB
    assert default.result.peak_allocated_bytes == 80 * MiB
    assert not not_simulated.simulated and "CUDA driver's pool" in not_simulated.reason
    assert not_simulated.to_json() == {"conf": "backend:cudaMallocAsync", "simulated": False,
                                       "reason": not_simulated.reason}
    assert not_simulated.measurement() is None
    m = default.measurement()
    assert (m.peak_reserved_bytes, m.peak_allocated_bytes, m.num_ooms) == (140 * MiB, 80 * MiB, 0)
    ranked = sorted(outcomes, key=ReplayOutcome.sort_key)
    assert ranked[-1] is not_simulated


def test_replay_over_processes_matches_in_process():
    trace = ops(*[("a", i, (i % 7 + 1) * 3 * MiB + 1000 * i) for i in range(40)], *[("f", i) for i in range(0, 40, 3)],
                *[("a", 100 + i, (i % 5 + 1) * MiB // 2) for i in range(30)])
    confs = ["", "expandable_segments:True", "roundup_power2_divisions:4", "max_split_size_mb:64",
             "backend:cudaMallocAsync"]
    assert replay(trace, confs, H200, jobs=3) == replay(trace, confs, H200, jobs=1)


def test_replay_many_equals_one_replay_per_run():
    other = ops(("a", 0, 30 * MiB), ("a", 1, 50 * MiB), ("f", 0), ("a", 2, 40 * MiB), ("f", 1), ("f", 2))
    runs = [(GROW, H200, None), (GROW, 80 * MiB, None), (other, H200, 60 * MiB), (GROW, 70 * MiB, None)]
    confs = ["", "expandable_segments:True", "backend:cudaMallocAsync"]
    each = [replay(trace, confs, device, budget_bytes=budget, jobs=1) for trace, device, budget in runs]
    assert replay_many(runs, confs, jobs=3) == replay_many(runs, confs, jobs=1) == each
    seen = []
    replay_many(runs, confs[:2], jobs=2, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 8) for i in range(1, 9)]


def test_budget_and_device_memory_cause_retry_and_oom():
    small = replay(GROW, [""], 80 * MiB)[0].result
    assert (small.num_alloc_retries, small.num_ooms, small.peak_reserved_bytes) == (1, 0, 80 * MiB)
    budget = replay(GROW, [""], H200, budget_bytes=80 * MiB)[0].result
    assert budget.num_alloc_retries == 1 and budget.num_ooms == 0
    too_small = replay(GROW, [""], 70 * MiB)[0]
    assert too_small.result.num_ooms == 1 and not too_small.fits
    assert too_small.sort_key() > replay(GROW, [""], H200)[0].sort_key()


def test_min_memory_finds_fit_and_no_retry_sizes():
    cap = min_memory(GROW, "")
    assert cap == Capacity("default", 80 * MiB, 140 * MiB)
    # The context's own memory comes on top; by default it is taken from the trace's meta.
    assert min_memory(GROW, "", overhead_bytes=500 * MiB).fits_bytes == 580 * MiB
    with_meta = Trace(GROW.kinds, GROW.addrs, GROW.sizes, GROW.streams, meta={"overhead_bytes": 100 * MiB})
    assert min_memory(with_meta, "").no_retry_bytes == 240 * MiB
    # Expandable segments: the 60 MiB segment grows to 80 MiB in 20 MiB pages, no retry needed.
    expandable = min_memory(GROW, "expandable_segments:True")
    assert expandable.fits_bytes == expandable.no_retry_bytes == 80 * MiB


def test_min_memory_many_and_async():
    caps = min_memory_many(GROW, ["", "backend:cudaMallocAsync"], jobs=2)
    assert caps[0].fits_bytes == 80 * MiB
    assert caps[1].fits_bytes is None and "CUDA driver's pool" in caps[1].reason


def test_min_memory_many_reports_progress():
    seen = []
    min_memory_many(GROW, ["", "expandable_segments:True", "max_split_size_mb:64"], jobs=2,
                    progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]
    seen.clear()
    replay(GROW, ["", "roundup_power2_divisions:4"], H200, jobs=1, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 2), (2, 2)]


TRACES = sorted((Path(__file__).resolve().parents[2] / "workloads" / "traces").glob("*.xz"))


@pytest.mark.skipif(core_notice() is not None, reason="hundreds of replays: too slow on the Python core")
@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_no_retry_shortcut_equals_the_bisection_on_shipped_traces(path):
    """The exact shortcut (no retry from the unlimited peak reserved + overhead, see sim/replay.py) against a
    search that does not know it: a bisection from 2 MiB up, and the sizes either side of the answer."""
    trace = load_trace(path)
    packed, overhead, version, step = pack(trace), trace.meta["overhead_bytes"], "2.11", 2 * MiB
    for conf in ("", "roundup_power2_divisions:4", "expandable_segments:True,max_split_size_mb:128"):
        assert no_retry_is_unlimited_peak(AllocConf.parse(conf), version)
        shortcut = min_memory(trace, conf).no_retry_bytes

        def no_retry(size: int) -> bool:
            result = simulate(packed, AllocConf.parse(conf), size, overhead_bytes=overhead, torch_version=version,
                              stop_at_retry=True)
            return result.first_retry_index is None

        assert _smallest(no_retry, step, 2 * shortcut, step) == (shortcut, True), f"{path.name} {conf}"
        assert no_retry(shortcut) and not no_retry(shortcut - step)


def test_no_retry_shortcut_does_not_hold_with_an_oversize_release_or_a_limit():
    trace = load_trace(next(p for p in TRACES if p.name.startswith("detection")))
    # max_split_size_mb keeps oversize blocks cached: unlimited, they pile up to 133 GiB, while releasing them
    # on demand lets a 15 GiB card run without a retry.
    assert not no_retry_is_unlimited_peak(AllocConf.parse("max_split_size_mb:128"), "2.11")
    cap = min_memory(trace, "max_split_size_mb:128")
    [unlimited] = replay(trace, ["max_split_size_mb:128"], 1 << 60, jobs=1)
    assert cap.no_retry_bytes < unlimited.result.peak_reserved_bytes // 8
    # A memory fraction scales with the device, and GC acts under it.
    assert not no_retry_is_unlimited_peak(AllocConf.parse("per_process_memory_fraction:0.9"), "2.11")
    assert no_retry_is_unlimited_peak(AllocConf.parse("per_process_memory_fraction:1.0"), "2.11")  # no limit (2.8+)


def test_smallest_bisects_and_recovers_from_non_monotone_sizes():
    step = 2 * MiB
    calls = []

    def ok(size):
        calls.append(size)
        return size >= 10 * step

    assert _smallest(ok, 0, 1000 * step, step) == (10 * step, True)
    assert len(calls) < 30  # bisection, not a scan
    # 14 steps fails although 10..13 pass: the verification above the answer finds it and moves up.
    assert _smallest(lambda s: s >= 10 * step and s != 14 * step, 0, 1000 * step, step) == (15 * step, False)
    # The first guess is too small (a memory fraction scales with the device): search upward.
    assert _smallest(lambda s: s >= 300 * step, 4 * step, 8 * step, step) == (300 * step, True)
    assert _smallest(lambda s: s >= 5 * step, 4 * step, 0, step) == (5 * step, True)
    assert _smallest(lambda s: False, 0, step, step) == (None, True)


# ---- the command line, through main() in this process ----

def cli(*args):
    """`alloctune replay ARGS` through main() in this process (what it prints is the subject), 200 columns wide."""
    return in_process("replay", *args, env={"COLUMNS": "200"})


def write_grow_pickle(path, **meta):
    """GROW as a PyTorch snapshot pickle, with what `alloctune record` adds if `meta` is given."""
    entries = [{"action": "alloc", "addr": 0x1000, "size": 60 * MiB, "stream": 0, "frames": []},
               {"action": "free_completed", "addr": 0x1000, "size": 60 * MiB, "stream": 0, "frames": []},
               {"action": "alloc", "addr": 0x1000, "size": 80 * MiB, "stream": 0, "frames": []},
               {"action": "free_completed", "addr": 0x1000, "size": 80 * MiB, "stream": 0, "frames": []}]
    snapshot = {"segments": [], "device_traces": [entries]}
    if meta:
        snapshot["alloctune"] = meta
    path.write_bytes(pickle.dumps(snapshot))
    return path


@pytest.fixture
def grow_pickle(tmp_path):
    return write_grow_pickle(tmp_path / "grow.pickle")


def test_cli_json_default_grid(grow_pickle):
    proc = cli(grow_pickle, "--json", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows, skipped = data["results"], {row["conf"]: row["reason"] for row in data["skipped"]}
    by_conf = {row["conf"]: row for row in rows}
    assert by_conf["default"]["peak_reserved_bytes"] == 140 * MiB
    for row in rows:   # results: the settings with figures; the others in skipped, with why
        assert row["simulated"] and {"peak_reserved_bytes", "peak_allocated_bytes", "num_alloc_retries",
                                     "num_ooms"} <= set(row)
    assert "driver's pool" in skipped["backend:cudaMallocAsync"]
    # GC without a budget does nothing: skipped with the reason, as a sweep would.
    assert any("garbage_collection_threshold" in conf for conf in skipped)
    ranked = [row["peak_reserved_bytes"] for row in rows]
    assert ranked == sorted(ranked)


def test_cli_conf_min_memory_and_sizes(grow_pickle, tmp_path):
    proc = cli(grow_pickle, "--conf", "expandable_segments:True", "--device-memory", "80MiB", "--min-memory", "--json",
               "--overhead", "0")
    assert proc.returncode == 0, proc.stderr
    rows = {row["conf"]: row for row in json.loads(proc.stdout)["results"]}
    assert set(rows) == {"default", "expandable_segments:True"}  # the default is always the baseline
    assert rows["default"]["num_alloc_retries"] == 1
    assert rows["default"]["min_memory_bytes"] == 80 * MiB
    assert rows["default"]["min_memory_no_retry_bytes"] == 140 * MiB
    save_trace(GROW, tmp_path / "grow.atrace")
    grid = tmp_path / "grid.txt"
    grid.write_text("# settings\nroundup_power2_divisions:4\n")
    proc = cli(tmp_path / "grow.atrace", "--grid", grid, "--budget", "75MiB")
    assert proc.returncode == 0, proc.stderr
    assert "roundup_power2_divisions:4" in proc.stdout and "an H200" in proc.stdout and "budget" in proc.stdout


def test_cli_ends_a_replay_at_its_first_oom():
    # A 1-byte device: the first request fails and the program would die there; so does the replay, at once,
    # instead of failing every later request too.
    trace = next(p for p in TRACES if p.name.startswith("llm-decode"))
    proc = cli(trace, "--conf", "expandable_segments:True", "--device-memory", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["results"]
    assert [(r["num_ooms"], r["first_oom_index"], r["peak_reserved_bytes"]) for r in rows] == [(1, 0, 0)] * 2


def test_cli_says_once_when_the_compiled_core_is_missing(grow_pickle):
    # As on a machine where the extension was not built (no compiler) or was built for another Python.
    hide_core = ("import sys; sys.modules['alloctune.sim._core'] = None; from alloctune.cli.main import main; "
                 "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", hide_core, "replay", str(grow_pickle), "--min-memory", "--json",
                           "--overhead", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("compiled simulator core is not available") == 1
    assert "pure-Python" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["results"][0]["min_memory_bytes"] == 80 * MiB
    if core_notice() is None:
        assert "compiled simulator core" not in cli(grow_pickle, "--json").stderr


def test_cli_errors(grow_pickle, tmp_path):
    assert cli(grow_pickle, "--jobs", "0").returncode == 2
    bad_size = cli(grow_pickle, "--device-memory", "lots")
    assert bad_size.returncode == 2 and "expected a size" in bad_size.stderr
    bad_conf = cli(grow_pickle, "--conf", "expandable_segments:true")
    assert bad_conf.returncode == 2 and "'True' or 'False'" in bad_conf.stderr
    (tmp_path / "junk").write_bytes(b"junk")
    junk = cli(tmp_path / "junk")
    assert junk.returncode == 2 and "neither" in junk.stderr and "Traceback" not in junk.stderr


def test_cli_uses_recorded_device_memory_and_shows_measured(tmp_path):
    path = write_grow_pickle(tmp_path / "rec.pickle", torch_version="2.11.0+cu130", device_total_bytes=100 * MiB,
                             overhead_bytes=0, measured=[{"conf": "default", "peak_reserved_bytes": 80 * MiB}])
    proc = cli(path, "--conf", "max_split_size_mb:128", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["conf"]: row for row in json.loads(proc.stdout)["results"]}
    # 100 MiB device: the second request only fits after releasing the cached 60 MiB segment.
    assert rows["default"]["peak_reserved_bytes"] == 80 * MiB and rows["default"]["num_alloc_retries"] == 1
    assert rows["default"]["measured_peak_reserved_bytes"] == 80 * MiB
    assert "measured_peak_reserved_bytes" not in rows["max_split_size_mb:128"]
    table = cli(path)
    said = " ".join(table.stdout.split())   # the header wraps at the terminal's width
    assert table.returncode == 0 and "the recording GPU" in said and "measured" in said


def test_unknown_overhead_defaults_to_a_context_sized_reserve():
    bare = Trace(GROW.kinds, GROW.addrs, GROW.sizes, GROW.streams)  # a snapshot from elsewhere: no overhead known
    assert min_memory(bare, "").fits_bytes == min_memory(GROW, "").fits_bytes + DEFAULT_OVERHEAD
