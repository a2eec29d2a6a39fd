"""The compiled simulator core (alloctune/sim/_core.cpp) against the Python reference (allocator.py): every field
of every result identical, on every shipped trace, under the default grid and the settings around it, on the
recording GPU, under budgets where GC acts, and on devices small enough to force retries and OOMs."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

import pytest
from key_values import boundary_values, numeric_keys

from alloctune.errors import ConfError
from alloctune.results.records import DriverWork
from alloctune.settings.conf import AllocConf
from alloctune.settings.grid import DEFAULT_GRID
from alloctune.settings.versions import check_conf
from alloctune.sim import simulate as simulate_module
from alloctune.sim.config import allocator_config
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
                  stop_at_retry=stop, window=steady_window(trace.meta), step_ends=trace.meta.get("step_ends"))
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
    """Every field, the driver work per step of a window and the step of the peak included (step ends every 250
    events, none of them the window's ends); every kind of driver work happens in some case, so that each of its
    counters is compared."""
    trace = random_trace(4000, seed)
    seen: Counter = Counter()
    # a little above the most ever live: retries and GC passes in a replay that runs to its end
    tight = simulate(trace, AllocConf.parse(""), 1 << 40).peak_requested_bytes * 11 // 10 + (300 << 20)
    for conf in GRID + MORE + ["max_split_size_mb:40,garbage_collection_threshold:0.5",
                               "roundup_power2_divisions:[64:8,128:2,>:1]",
                               "expandable_segments:True,large_segment_size_mb:40"]:
        for device, budget in ((1 << 40, None), (3 << 30, None), (4 << 30, 2 << 30), (1 << 30, None),
                               (tight, None), (tight, tight - (300 << 20))):
            for window in (None, SteadyWindow(seed * 100 + 1, 4000 - seed * 300 - 1, 7)):
                kw = dict(budget_bytes=budget, overhead_bytes=300 << 20, window=window, step_ends=range(0, 4001, 250))
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


# What makes each key act: a split limit (max_non_split_rounding_mb), expandable segments (large_segment_size_mb's page)
BESIDE = ["", "max_split_size_mb:20", "expandable_segments:True"]


@pytest.mark.parametrize("key", sorted(numeric_keys()))
def test_both_cores_agree_on_every_value_the_registry_accepts(key):
    """Every numeric key at every edge (tests/key_values.py), alone and beside what makes it act, on a roomy device
    and under a budget where GC acts: the registry (keys.py's parse, versions.py's ranges for torch 2.13) refuses
    the value, or both cores replay it field for field alike, never holding less than they hand out."""
    trace = random_trace(1500, 3)
    accepted = set()
    for value in boundary_values(numeric_keys()[key]):
        for beside in BESIDE:
            try:
                conf = AllocConf.parse(",".join(filter(None, [f"{key}:{value}", beside])))
            except ConfError:
                continue
            if check_conf(conf, "2.13.0") is not None:
                continue
            accepted.add(value)
            for device, budget in ((1 << 40, None), (6 << 30, 3 << 30)):
                kw = dict(budget_bytes=budget, overhead_bytes=300 << 20, torch_version="2.13.0")
                want = simulate(trace, conf, device, core="python", **kw)
                got = simulate(trace, conf, device, core="compiled", **kw)
                assert got == want, f"{conf} device={device} budget={budget}"
                assert want.peak_reserved_bytes >= max(want.peak_allocated_bytes, want.peak_requested_bytes), conf
    assert accepted and len(accepted) < len(boundary_values(numeric_keys()[key])), accepted


@pytest.mark.parametrize("figures", [dict(large_segment_size_mb=2**44), dict(max_split_size_mb=2**44),
                                     dict(max_split_size_mb=20, max_non_split_rounding_mb=2**44 - 1),
                                     dict(roundup_power2_divisions=2**55)])
def test_figures_past_the_compiled_cores_range_are_replayed_by_the_python_core(figures):
    """A setting made without the registry (AllocConf's fields set directly) may hold what no torch reads: the
    compiled core refuses figures past its 64-bit range (they wrapped, and divisions of 2^55 divided by zero)
    and the replay is the Python core's."""
    trace, conf = random_trace(600, 4), AllocConf(**figures)
    with pytest.raises(OverflowError):
        simulate(trace, conf, 1 << 40, core="compiled")
    assert simulate(trace, conf, 1 << 40) == simulate(trace, conf, 1 << 40, core="python")
    setting = {k: v for k, v in vars(allocator_config(AllocConf(), 1 << 40)).items() if k != "label"}
    with pytest.raises(OverflowError):   # the core itself, given a figure beyond 64 bits
        simulate_module._core.simulate([0], [0], [512], [0], stop_at_retry=False, marks=[1],
                                       **{**setting, "large_segment": 2**64})
