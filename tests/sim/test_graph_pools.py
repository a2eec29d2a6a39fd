"""CUDA graphs' private pools in the simulator (sim/pools.py, both cores): synthetic traces with captures, each
figure checked exactly and the two cores checked against each other on every replay."""
from __future__ import annotations

import random

import pytest

from alloctune.settings.conf import AllocConf
from alloctune.sim.simulate import SimResult, core_notice, simulate
from alloctune.sim.trace import (ALLOC, EMPTY_CACHE, FREE, FREE_REQUESTED, POOL_BEGIN, POOL_END, POOL_RELEASE,
                                 POOL_STREAM, Trace, load_trace, save_trace)

MiB = 1 << 20
GiB = 1 << 30
CORES = ["python", "compiled"] if core_notice() is None else ["python"]


class Ops:
    """A trace written event by event: allocations numbered in order, pool events as the loader makes them."""

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.addrs: list[int] = []
        self.sizes: list[int] = []
        self.streams: list[int] = []
        self._next = 0
        self._live: dict[int, tuple[int, int]] = {}

    def _add(self, kind: int, addr: int, size: int = 0, stream: int = 0) -> None:
        self.kinds.append(kind), self.addrs.append(addr), self.sizes.append(size), self.streams.append(stream)

    def alloc(self, size: int, stream: int = 0) -> int:
        ident, self._next = self._next, self._next + 1
        self._live[ident] = (size, stream)
        self._add(ALLOC, ident, size, stream)
        return ident

    def free(self, ident: int) -> None:
        self._add(FREE, ident, *self._live.pop(ident))

    def request_free(self, ident: int) -> None:
        """A free whose completion waits (a block used on another stream): its FREE comes later."""
        self._add(FREE_REQUESTED, ident, *self._live[ident])

    def capture(self, pool: int, stream: int) -> None:
        """A capture into `pool` begins; its allocations are stream index `stream`."""
        self._add(POOL_BEGIN, pool)
        self._add(POOL_STREAM, pool, 0, stream)

    def end(self, pool: int) -> None:
        self._add(POOL_END, pool)

    def release(self, pool: int) -> None:
        self._add(POOL_RELEASE, pool)

    def empty_cache(self) -> None:
        self._add(EMPTY_CACHE, -1)

    def trace(self) -> Trace:
        return Trace(list(self.kinds), list(self.addrs), list(self.sizes), list(self.streams))


def replay(ops: Ops | Trace, conf: str = "", device: int = 80 * GiB, version: str = "2.11") -> SimResult:
    """The replay on every core, which must agree field for field."""
    trace = ops.trace() if isinstance(ops, Ops) else ops
    results = [simulate(trace, AllocConf.parse(conf), device, torch_version=version, core=core) for core in CORES]
    assert all(r == results[0] for r in results[1:])
    return results[0]


def reserved_now(ops: Ops, conf: str = "", version: str = "2.11") -> int:
    return replay(ops, conf, version=version).stats["reserved_bytes.all.current"]


def test_blocks_freed_during_a_capture_are_reused_within_its_pool():
    ops = Ops()
    ops.capture(1, stream=1)
    ops.free(ops.alloc(8 * MiB, 1))
    ops.alloc(8 * MiB, 1)   # the block freed above: no new segment
    ops.end(1)
    result = replay(ops)
    assert (result.peak_reserved_bytes, result.num_device_alloc) == (20 * MiB, 1)


def test_no_reuse_across_pools():
    ops = Ops()
    ops.free(ops.alloc(8 * MiB))        # a free 20 MiB segment in the default pool
    ops.capture(1, stream=1)
    ops.free(ops.alloc(8 * MiB, 1))     # the graph's pool gets its own segment
    ops.end(1)
    ops.capture(2, stream=2)
    ops.alloc(8 * MiB, 2)               # and another graph's pool its own
    ops.end(2)
    result = replay(ops)
    assert (result.peak_reserved_bytes, result.num_device_alloc) == (60 * MiB, 3)


def test_nothing_in_a_pool_is_released_while_its_graph_lives_then_all_of_it():
    ops = Ops()
    ops.capture(1, stream=1)
    ops.free(ops.alloc(30 * MiB, 1))
    ops.end(1)
    ops.free(ops.alloc(50 * MiB))
    ops.empty_cache()   # the default pool's segment goes, the graph's stays
    assert reserved_now(ops) == 30 * MiB
    ops.release(1)      # the graph is destroyed: its pool may now be released
    assert reserved_now(ops) == 30 * MiB
    ops.empty_cache()
    assert reserved_now(ops) == 0


def test_a_shared_pool_lives_while_any_of_its_graphs_does():
    ops = Ops()
    ops.capture(1, stream=1)
    first = ops.alloc(30 * MiB, 1)
    ops.end(1)
    ops.free(first)                  # the first graph's output, freed after its capture, stays in the pool
    ops.capture(1, stream=1)         # a second graph captured into the same pool (pool=g1.pool())
    ops.alloc(30 * MiB, 1)           # reuses the first graph's block
    ops.end(1)
    assert replay(ops).peak_reserved_bytes == 30 * MiB
    ops.release(1)
    ops.empty_cache()                # one graph of two gone: kept
    assert reserved_now(ops) == 30 * MiB


def test_a_pool_released_by_its_last_graph_keeps_what_is_still_allocated():
    ops = Ops()
    ops.capture(1, stream=1)
    kept = ops.alloc(30 * MiB, 1)    # a static output the program still holds after the graph dies
    ops.free(ops.alloc(50 * MiB, 1))
    ops.end(1)
    ops.release(1)
    ops.empty_cache()
    assert reserved_now(ops) == 30 * MiB
    ops.free(kept)
    ops.empty_cache()
    assert reserved_now(ops) == 0


def test_the_retry_that_releases_everything_is_skipped_during_a_capture():
    ops = Ops()
    ops.free(ops.alloc(600 * MiB))   # cached in the default pool
    ops.capture(1, stream=1)
    ops.alloc(600 * MiB, 1)          # on a 1 GiB device only the release of the cached segment makes room
    ops.end(1)
    during = replay(ops, device=GiB)
    assert (during.first_oom_index, during.num_alloc_retries) == (4, 0)
    eager = Ops()   # the same request on another stream outside a capture: the retry makes room
    eager.free(eager.alloc(600 * MiB))
    eager.alloc(600 * MiB, 1)
    after = replay(eager, device=GiB)
    assert (after.first_oom_index, after.num_alloc_retries, after.peak_reserved_bytes) == (None, 1, 600 * MiB)


def test_empty_cache_during_a_capture_keeps_the_default_pools():
    ops = Ops()
    ops.free(ops.alloc(50 * MiB))
    ops.capture(1, stream=1)
    ops.empty_cache()
    assert reserved_now(ops) == 50 * MiB
    ops.end(1)
    ops.empty_cache()
    assert reserved_now(ops) == 0


@pytest.mark.parametrize("version, reserved", [("2.11", 40 * MiB), ("2.4", 30 * MiB)])
def test_expandable_segments_in_a_private_pool_from_2_5(version, reserved):
    """From 2.5 a private pool maps 20 MiB pages of an expandable segment; before, it cudaMallocs a segment."""
    ops = Ops()
    ops.capture(1, stream=1)
    ops.alloc(30 * MiB, 1)
    ops.end(1)
    result = replay(ops, "expandable_segments:True", version=version)
    assert (result.peak_reserved_bytes, result.stats["segment.all.peak"] if version == "2.4" else 0) == \
           (reserved, 1 if version == "2.4" else 0)


def test_an_expandable_private_pool_keeps_its_pages_while_its_graph_lives():
    ops = Ops()
    ops.capture(1, stream=1)
    ops.free(ops.alloc(30 * MiB, 1))
    ops.end(1)
    ops.empty_cache()
    assert reserved_now(ops, "expandable_segments:True") == 40 * MiB
    ops.release(1)
    ops.empty_cache()
    assert reserved_now(ops, "expandable_segments:True") == 0


def test_settings_apply_inside_a_pool():
    """Rounding and max_split_size_mb inside a private pool: 300 MiB + 1 rounds to 320 MiB with 4 divisions; a
    200 MiB block is oversize under max_split_size_mb:128, so a 20 MiB request does not split it."""
    ops = Ops()
    ops.capture(1, stream=1)
    ops.free(ops.alloc(300 * MiB + 1, 1))
    ops.end(1)
    assert replay(ops, "roundup_power2_divisions:4").peak_reserved_bytes == 320 * MiB
    ops = Ops()
    ops.capture(1, stream=1)
    ops.free(ops.alloc(200 * MiB, 1))
    ops.alloc(20 * MiB, 1)
    ops.end(1)
    assert replay(ops, "max_split_size_mb:128").peak_reserved_bytes == 220 * MiB
    assert replay(ops).peak_reserved_bytes == 200 * MiB


def test_pool_events_round_trip_the_compact_format(tmp_path):
    ops = Ops()
    ops.capture(1, stream=2)
    ops.free(ops.alloc(8 * MiB, 2))
    ops.end(1)
    ops.release(1)
    ops.empty_cache()
    save_trace(ops.trace(), tmp_path / "t.xz")
    back = load_trace(tmp_path / "t.xz")
    assert (back.kinds, back.addrs, back.sizes, back.streams) == (ops.kinds, ops.addrs, ops.sizes, ops.streams)


def random_graph_trace(events: int, seed: int) -> Trace:
    """Eager allocations on 2 streams with captures into 3 pools (shared at random), releases, empty_caches, frees
    requested before their completion."""
    rng = random.Random(seed)
    ops, live, open_pool, streams = Ops(), [], None, {}
    for _ in range(events):
        r = rng.random()
        if r < 0.03 and open_pool is None:
            open_pool = rng.randrange(1, 4)
            ops._add(POOL_BEGIN, open_pool)
            stream = streams.setdefault(open_pool, 2 + open_pool)
            ops._add(POOL_STREAM, open_pool, 0, stream)
        elif r < 0.05 and open_pool is not None:
            ops.end(open_pool)
            open_pool = None
        elif r < 0.06:
            ops.release(rng.randrange(1, 4))
        elif r < 0.07:
            ops.empty_cache()
        elif r < 0.1 and live:
            ops.request_free(rng.choice(live))
        elif live and (r < 0.55 or len(live) > 40):
            ops.free(live.pop(rng.randrange(len(live))))
        else:
            stream = streams[open_pool] if open_pool is not None else rng.randrange(2)
            size = rng.choice([rng.randrange(1, 1 << 20), rng.randrange(1 << 20, 12 << 20),
                               rng.randrange(12 << 20, 200 << 20)])
            live.append(ops.alloc(size, stream))
    return ops.trace()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("conf, device", [("", 80 * GiB), ("", 3 * GiB), ("expandable_segments:True", 3 * GiB),
                                          ("max_split_size_mb:64,roundup_power2_divisions:4", 3 * GiB)])
def test_the_cores_agree_on_random_traces_with_captures(seed, conf, device):
    trace = random_graph_trace(3000, seed)
    replay(trace, conf, device)
    replay(trace, conf, device, version="2.4")
