"""Driver work per steady step, counted exactly on traces built so that it is known by hand, on both cores: the
job's empty_cache every step (read from a real snapshot pickle, its steps placed by time), shapes that grow so
that the default calls cudaMalloc in steady state where expandable segments map pages, the retry under a budget,
and garbage collection under one."""
from __future__ import annotations

import pickle

import pytest

from alloctune.results.records import DriverWork
from alloctune.settings.conf import AllocConf
from alloctune.sim.replay import replay
from alloctune.sim.simulate import core_notice, simulate
from alloctune.sim.steady import SteadyWindow, steady_window
from alloctune.sim.trace import ALLOC, EMPTY_CACHE, FREE, Trace, load_trace, save_trace

MiB = 2**20
DEVICE = 1 << 40
CORES = ["python", pytest.param("compiled", marks=pytest.mark.skipif(core_notice() is not None,
                                                                      reason="the compiled core is not built"))]


def entry(action, addr, size, time_us):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": time_us, "frames": []}


def empty_cache_snapshot(steps: int, warmup: int, settings: dict | None = None) -> dict:
    """A job recorded under the default: a 50 MiB model, then each step 30 MiB, 3 MiB and 100 KiB allocated and
    freed and torch.cuda.empty_cache() (the three segments released), then the model freed and the cache emptied at
    exit. The entries are torch's as the default allocator records them; the hook noted each step's end."""
    out, ends, t = [entry("segment_alloc", 0xA000_0000, 50 * MiB, 1), entry("alloc", 0xA000_0000, 50 * MiB, 2)], [], 10
    blocks = [(0x1000_0000, 30 * MiB, 30 * MiB), (0x2000_0000, 3 * MiB, 20 * MiB), (0x3000_0000, 100 << 10, 2 * MiB)]
    for _ in range(steps):
        for addr, size, segment in blocks:
            out += [entry("segment_alloc", addr, segment, t), entry("alloc", addr, size, t + 1)]
            t += 2
        for addr, size, _segment in blocks:
            out += [entry("free_requested", addr, size, t), entry("free_completed", addr, size, t)]
            t += 1
        out += [entry("segment_free", addr, segment, t) for addr, _size, segment in blocks]
        ends.append(t)
        t += 10
    out += [entry("free_completed", 0xA000_0000, 50 * MiB, t), entry("segment_free", 0xA000_0000, 50 * MiB, t + 1)]
    return {"segments": [], "device_traces": [out],
            "allocator_settings": settings or {"garbage_collection_threshold": 0.0, "max_split_size": -1},
            "alloctune": {"step_ends_us": ends, "warmup_steps": warmup}}


def load_snapshot(tmp_path, snapshot: dict) -> Trace:
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    return load_trace(path)


def work(trace: Trace, conf: str, core: str, budget: int | None = None) -> DriverWork | None:
    kw = dict(budget_bytes=budget, core=core, window=steady_window(trace.meta))
    marked = simulate(trace, AllocConf.parse(conf), DEVICE, step_ends=trace.meta.get("step_ends"), **kw)
    # the counters read at every step end (for the step of the peak) leave the driver work as it was
    assert marked.driver_work == simulate(trace, AllocConf.parse(conf), DEVICE, **kw).driver_work
    return marked.driver_work


def test_empty_cache_calls_and_step_ends_are_read_from_a_snapshot(tmp_path):
    trace = load_snapshot(tmp_path, empty_cache_snapshot(steps=6, warmup=2))
    assert trace.meta["empty_cache_calls"] == 7   # one per step and the one at exit
    per_step = [ALLOC, ALLOC, ALLOC, FREE, FREE, FREE, EMPTY_CACHE]
    assert trace.kinds == [ALLOC, *per_step * 6, FREE, EMPTY_CACHE]
    assert trace.meta["step_ends"] == [1 + 7 * k for k in range(1, 7)]   # each after its empty_cache
    assert "step_ends_us" not in trace.meta
    assert steady_window(trace.meta) == SteadyWindow(15, 43, 4)
    save_trace(trace, tmp_path / "t.xz")   # the compact format keeps both
    again = load_trace(tmp_path / "t.xz")
    assert (again.kinds, again.meta["step_ends"]) == (trace.kinds, trace.meta["step_ends"])


def test_releases_the_allocator_could_make_itself_are_not_taken_for_calls(tmp_path):
    """Under settings that collect garbage, a release followed by a new segment may be the allocator's own: only the
    one at exit, followed by nothing, is a call; under the default every release is."""
    settings = {"garbage_collection_threshold": 0.6, "max_split_size": -1}
    trace = load_snapshot(tmp_path, empty_cache_snapshot(steps=3, warmup=1, settings=settings))
    assert trace.meta["empty_cache_calls"] == 2   # the last step's (the model's free follows it) and the exit's
    assert trace.kinds.count(EMPTY_CACHE) == 2


@pytest.mark.parametrize("core", CORES)
def test_empty_cache_every_step(tmp_path, core):
    """Default: the three segments cudaMalloc'd and cudaFree'd every step, one wait for the device. Expandable
    segments: the model's segment (60 MiB mapped, 10 free behind the model) grows by a 20 MiB page for the 30 MiB
    and another for the 3 MiB, and a small page is mapped for the 100 KiB; empty_cache unmaps the two large pages in
    one range and the small one. The warm-up and the model's free at exit are outside the window."""
    trace = load_snapshot(tmp_path, empty_cache_snapshot(steps=6, warmup=2))
    assert work(trace, "", core) == DriverWork(4, device_allocs=3, device_alloc_bytes=52 * MiB, device_frees=3,
                                               device_free_bytes=52 * MiB, syncs=1)
    assert work(trace, "expandable_segments:True", core) == DriverWork(4, maps=3, map_bytes=42 * MiB, unmaps=2,
                                                                       unmap_bytes=42 * MiB, syncs=1)


def growing(steps: int = 6, warmup: int = 2) -> Trace:
    """Step i allocates (60 + 10 i) MiB and frees it: no cached block ever serves the next step."""
    kinds, addrs, sizes = [], [], []
    for i in range(steps):
        kinds += [ALLOC, FREE]
        addrs += [i, i]
        sizes += [(60 + 10 * i) * MiB] * 2
    return Trace(kinds, addrs, sizes, [0] * len(kinds),
                 meta={"step_ends": [2 * (i + 1) for i in range(steps)], "warmup_steps": warmup})


@pytest.mark.parametrize("core", CORES)
def test_growing_shapes_cudamalloc_under_the_default_and_map_under_expandable_segments(core):
    """Default: one cudaMalloc a step of 80, 90, 100, 110 MiB in the window. Expandable segments grow the one
    segment by the shortfall in whole 20 MiB pages: 80 MiB mapped by step 1, 20 MiB more at steps 3 and 5."""
    trace = growing()
    assert work(trace, "", core) == DriverWork(4, device_allocs=1, device_alloc_bytes=95 * MiB)
    assert work(trace, "expandable_segments:True", core) == DriverWork(4, maps=0.5, map_bytes=10 * MiB)


@pytest.mark.parametrize("core", CORES)
def test_retry_under_a_budget(core):
    """150 MiB allowed: from step 2 on the new segment does not fit beside the cached ones, which are released
    (60 and 70 MiB at step 2, then the last step's) before the retry succeeds."""
    assert work(growing(), "", core, budget=150 * MiB) == DriverWork(
        4, device_allocs=1, device_alloc_bytes=95 * MiB, device_frees=1.25, device_free_bytes=100 * MiB, syncs=1,
        alloc_retries=1)


@pytest.mark.parametrize("core", CORES)
def test_garbage_collection_under_a_fraction(core):
    """GC at half of 150 MiB frees the oldest cached segments before each new one: 60 MiB at step 2, 70 and 80 at
    step 3 (two rounds of one pass), then the last step's: no retry."""
    assert work(growing(), "garbage_collection_threshold:0.5", core, budget=150 * MiB) == DriverWork(
        4, device_allocs=1, device_alloc_bytes=95 * MiB, device_frees=1.25, device_free_bytes=100 * MiB, syncs=1,
        gc_passes=1)


@pytest.mark.parametrize("core", CORES)
def test_without_steady_steps_the_whole_run_is_counted(core):
    """No step marks, or no step after the warm-up: the whole run's totals, said to be so."""
    unmarked = growing()
    unmarked.meta.clear()
    whole = DriverWork(0, device_allocs=6, device_alloc_bytes=(60 + 70 + 80 + 90 + 100 + 110) * MiB, whole_run=True)
    assert work(unmarked, "", core) == whole
    assert work(growing(steps=6, warmup=6), "", core) == whole


def test_replay_outcomes_carry_the_driver_work():
    outcome, = replay(growing(), [""], DEVICE, jobs=1)
    assert outcome.result is not None and outcome.result.driver_work == DriverWork(4, device_allocs=1,
                                                                                  device_alloc_bytes=95 * MiB)
    assert outcome.measurement().driver_work == outcome.result.driver_work
    assert outcome.to_json()["driver_work"]["device_allocs"] == 1
