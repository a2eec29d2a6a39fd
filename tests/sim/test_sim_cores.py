"""The compiled simulator core (alloctune/sim/_core.cpp) against the Python reference (allocator.py): every field
of every result identical, on every shipped trace, under the default grid and the settings around it, on the
recording GPU, under budgets where GC acts, and on devices small enough to force retries and OOMs."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from alloctune.results.records import DriverWork
from alloctune.settings.conf import AllocConf
from alloctune.settings.grid import DEFAULT_GRID
from alloctune.sim.simulate import core_notice, pack, simulate
from alloctune.sim.steady import SteadyWindow, steady_window
from alloctune.sim.trace import ALLOC, FREE, FREE_REQUESTED, Trace, load_trace

pytestmark = pytest.mark.skipif(core_notice() is not None,
                                reason="the compiled core is not built (pip install -e . or setup.py build_ext)")

TRACES = sorted((Path(__file__).resolve().parents[2] / "workloads" / "traces").glob("*.xz"))
GRID = [c for c in DEFAULT_GRID if not AllocConf.parse(c).is_async]
MORE = ["max_split_size_mb:128,max_non_split_rounding_mb:64", "large_segment_size_mb:40"]


def cases(trace: Trace):
    """(setting, device memory, budget, torch version, stop_at_retry): what each trace is replayed under."""
    device, overhead = trace.meta["device_total_bytes"], trace.meta["overhead_bytes"]
    allocated = next(m for m in trace.meta["measured"] if m["conf"] == "")["peak_allocated_bytes"]
    tight = overhead + allocated * 11 // 10   # a little above what is live at the peak: retries, some OOMs
    small = overhead + allocated * 7 // 10    # less than is live at the peak: an OOM, always
    budget = allocated * 12 // 10             # GC at 0.6 or 0.8 of it acts
    for conf in GRID + MORE:
        yield conf, device, budget if "garbage_collection" in conf else None, "2.11", False
    for conf in ("", "expandable_segments:True", "max_split_size_mb:128"):
        yield conf, tight, None, "2.11", False
        yield conf, tight, None, "2.11", True
        yield conf, small, None, "2.11", False
    # older allocators: a fraction of the whole device switches GC on (2.7), divisions of 1 did not round (2.3)
    yield "garbage_collection_threshold:0.6", device, device, "2.7", False
    yield "roundup_power2_divisions:1", device, None, "2.3", False


@pytest.mark.slow
@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_compiled_core_matches_python_on_shipped_traces(path):
    trace = load_trace(path)
    packed = pack(trace)
    for conf, device, budget, version, stop in cases(trace):
        kw = dict(budget_bytes=budget, overhead_bytes=trace.meta["overhead_bytes"], torch_version=version,
                  stop_at_retry=stop, window=steady_window(trace.meta))
        want = simulate(trace, AllocConf.parse(conf), device, core="python", **kw)
        got = simulate(packed, AllocConf.parse(conf), device, core="compiled", **kw)
        assert got == want, f"{path.name} {conf or 'default'} device={device} budget={budget} {version} {stop}"


def random_trace(events: int, seed: int) -> Trace:
    """Sizes from 1 byte to 300 MiB over 3 streams, lifetimes at random, frees of unknown addresses, frees requested
    well before their completion (some twice, some of unknown addresses)."""
    rng = random.Random(seed)
    kinds, addrs, sizes, streams, live = [], [], [], [], {}
    for i in range(events):
        if live and rng.random() < 0.05:
            addr = rng.choice(list(live)) if rng.random() < 0.97 else 10**9 + i
            size, stream = live.get(addr, (0, 0))
            kinds.append(FREE_REQUESTED)
        elif live and rng.random() < 0.45:
            addr = rng.choice(list(live)) if rng.random() < 0.97 else 10**9 + i
            size, stream = live.pop(addr, (0, 0))
            kinds.append(FREE)
        else:
            addr, stream = i * 7, rng.randrange(3)
            size = rng.choice([rng.randrange(1, 1 << 20), rng.randrange(1 << 20, 12 << 20),
                               rng.randrange(12 << 20, 300 << 20)])
            live[addr] = (size, stream)
            kinds.append(ALLOC)
        addrs.append(addr), sizes.append(size), streams.append(stream)
    return Trace(kinds, addrs, sizes, streams)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_core_matches_python_on_random_traces(seed):
    """Every field, the driver work per step of a window included; every kind of driver work happens in some case,
    so that each of its counters is compared."""
    trace = random_trace(4000, seed)
    seen: Counter = Counter()
    # a little above the most ever live: retries and GC passes in a replay that runs to its end
    tight = simulate(trace, AllocConf.parse(""), 1 << 40).peak_requested_bytes * 11 // 10 + (300 << 20)
    for conf in GRID + MORE + ["max_split_size_mb:40,garbage_collection_threshold:0.5",
                               "roundup_power2_divisions:[64:8,128:2,>:1]",
                               "expandable_segments:True,large_segment_size_mb:40"]:
        for device, budget in ((1 << 40, None), (3 << 30, None), (4 << 30, 2 << 30), (1 << 30, None),
                               (tight, None), (tight, tight - (300 << 20))):
            for window in (None, SteadyWindow(seed * 100, 4000 - seed * 300, 7)):
                kw = dict(budget_bytes=budget, overhead_bytes=300 << 20, window=window)
                want = simulate(trace, AllocConf.parse(conf), device, core="python", **kw)
                got = simulate(trace, AllocConf.parse(conf), device, core="compiled", **kw)
                assert got == want, f"seed {seed} {conf or 'default'} device={device} budget={budget} {window}"
                if want.driver_work is not None:
                    seen.update(k for k, v in asdict(want.driver_work).items() if v)
    assert set(seen) >= {f.name for f in fields(DriverWork)} - {"steps", "whole_run"}, seen


@pytest.mark.parametrize("core", ["python", "compiled"])
def test_driver_work_window_at_the_trace_ends(core):
    """A window from the first event to the last counts everything; one past the end is refused."""
    trace = random_trace(500, 1)
    whole = simulate(trace, AllocConf.parse(""), 1 << 40, core=core).driver_work
    window = simulate(trace, AllocConf.parse(""), 1 << 40, core=core, window=SteadyWindow(0, 500, 5)).driver_work
    assert whole is not None and whole.whole_run and whole.device_allocs > 0
    assert window is not None and window.steps == 5 and window.device_allocs == whole.device_allocs / 5
    with pytest.raises(ValueError):
        simulate(trace, AllocConf.parse(""), 1 << 40, core=core, window=SteadyWindow(0, 501, 5))
