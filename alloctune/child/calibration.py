"""The calibration child: `PYTHON -m alloctune.child.calibration native|expandable` times, on an idle GPU and
through torch's own caching allocator, the driver calls that allocator makes; the parent (calibration.py) runs it
once per mode, `expandable` under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (a process has one allocator
configuration), and builds the `Calibration` from the two answers.

native: cudaMalloc and cudaFree of whole segments of 2 MiB (the small pool's), 20 MiB, 128 MiB and 1 GiB, and an
idle torch.cuda.synchronize(). expandable: growing by whole pages (a `segment_map`) and releasing them (a
`segment_unmap`), at the same sizes. Every timed call is checked to be the driver call it is said to be:
`memory_stats` num_device_alloc / num_device_free and the reserved bytes must move by exactly what it should, or
the child stops with what it saw. The device is synchronised before each timed call, so nothing queued is waited
for: these are the calls' own costs on an idle device. Then each kind is timed again at every size behind two
depths of GPU work queued on purpose (`BusyFit`), as a running job makes it: the device busy. How
much of the queued work a call waits for is the slope between the depths (a cudaFree and an unmap wait for all of
it; a cudaMalloc or a map, on most drivers, for none); its own cost is its time less that wait. A job's calls are
priced by these (decide/speed.py); on an H100 they were 21% below to 49% above the idle device's, call by call.

Each answer is one line marked MARK on stdout: an `Answer`, or {"error": ...}. The
analysis (`summarise`, `fit`) is pure and tested on built samples. Standard library and torch only, and light
alloctune modules (the records, provenance).
"""
from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any, Callable, Iterator

from ..results.calibration import MiB, BusyFit, CostFit, CostSample
from .provenance import driver_version, host_cpu

MARK = "ALLOCTUNE-CALIBRATION "
NO_GPU_EXIT = 3
SEGMENTS = (2 * MiB, 20 * MiB, 128 * MiB, 1024 * MiB)
ROUNDS = 8          # repeats of each size (one warm-up round before them is not kept)
PER_ROUND = 4       # native segments allocated before one empty_cache frees them all, as empty_cache usually does
SYNCS = 200
SMALL_SEGMENT = 2 * MiB   # the small pool's segment, which holds requests of at most 1 MiB
# Each kind is also timed at every size behind this much GPU work queued (ms): more than the slowest call measured
# (a map of 1 GiB, about 3.3 ms on an H100), so that a call which does not wait ends with work still queued.
QUEUED_MS = (6.0, 14.0)
QUEUED_ROUNDS = 8


@dataclass(frozen=True)
class Facts:
    """What the costs depend on, as the child saw it."""

    gpu: str
    driver: str | None
    cuda: str | None
    torch: str
    host_cpu: str | None   # the host's CPU model: a call's cost moves with it (provenance.host_cpu)


@dataclass(frozen=True)
class Answer:
    """One child's measurements, each kind as its fit."""

    facts: Facts
    fits: dict[str, CostFit]


class Unmeasured(RuntimeError):
    """A measurement the child could not make as it should: a timed call that was not the driver call it was to
    be (the allocator did something else), or no room on the device to make it."""


def summarise(nbytes: int, times_us: list[float]) -> CostSample:
    """The repeats of one call at one size as their median and quartiles."""
    if len(times_us) == 1:
        low = high = times_us[0]
    else:
        low, _, high = statistics.quantiles(times_us, n=4, method="inclusive")
    return CostSample(bytes=nbytes, runs=len(times_us), median_us=statistics.median(times_us), low_us=low,
                      high_us=high)


def fit(samples: list[CostSample]) -> CostFit:
    """The repeated-median line through the medians, microseconds against MiB (Siegel: each size's median slope to
    the others, their median; the fixed cost is the median of what that slope leaves). One size of four far off
    the others (a host hiccup through all of its rounds: results/h100-speed-rebuilt-2026-12-06d, where least
    squares put a cudaMalloc at 135 us for 49) leaves the line of the rest. Neither term may be negative: a
    falling line (sizes that cost the same, and noise) is a flat one at their median; one that would cross zero
    above 0 MiB starts at the origin."""
    xs = [s.bytes / MiB for s in samples]
    ys = [s.median_us for s in samples]
    slopes = [statistics.median((ys[j] - y) / (xs[j] - x) for j in range(len(xs)) if xs[j] != x)
              for x, y in zip(xs, ys) if any(other != x for other in xs)]
    slope = max(0.0, statistics.median(slopes)) if slopes else 0.0
    fixed = max(0.0, statistics.median(y - slope * x for x, y in zip(xs, ys)))
    return CostFit(fixed_us=fixed, per_mib_us=slope, samples=samples)


def child_main(argv: list[str]) -> int:
    mode = argv[0] if argv else "native"
    try:
        import torch
    except Exception as exc:   # ImportError, or a broken install raising anything at import
        return _answer({"error": f"cannot import torch ({type(exc).__name__}: {exc})"}, 1)
    if not torch.cuda.is_available():
        return _answer({"error": "no CUDA GPU is visible"}, NO_GPU_EXIT)
    try:
        fits = _native(torch) if mode == "native" else _expandable(torch)
    except Unmeasured as exc:
        return _answer({"error": str(exc)}, 1)
    return _answer(asdict(Answer(_facts(torch), fits)), 0)


def _answer(data: dict, code: int) -> int:
    print(MARK + json.dumps(data), flush=True)
    return code


def _facts(torch) -> Facts:
    return Facts(gpu=torch.cuda.get_device_name(), driver=driver_version(), cuda=torch.version.cuda,
                 torch=str(torch.__version__), host_cpu=host_cpu())


def _native(torch) -> dict[str, CostFit]:
    allocs, frees = [], []
    for segment in _sizes(torch, PER_ROUND):
        alloc_us, free_us = _segments(torch, segment)
        allocs.append(summarise(segment, alloc_us))
        frees.append(summarise(segment, free_us))
    fits = {"device_alloc": fit(allocs), "device_free": fit(frees), "sync": fit([summarise(0, _syncs(torch))])}
    return _on_a_busy_device(torch, fits, native=True)


def _sizes(torch, per_round: int) -> list[int]:
    """The segment sizes measured: those that fit, `per_round` at once, in half the device's free memory."""
    free, _ = torch.cuda.mem_get_info()
    sizes = [s for s in SEGMENTS if s * per_round <= free // 2]
    if not sizes:
        raise Unmeasured(f"only {free} B of the device are free: too little to measure a segment")
    return sizes


def _segments(torch, segment: int) -> tuple[list[float], list[float]]:
    """cudaMalloc of PER_ROUND new segments of `segment` bytes, one at a time, then cudaFree of all of them in one
    empty_cache (per segment), ROUNDS times after a warm-up round."""
    cuda = torch.cuda
    # The small pool packs requests of at most 1 MiB into 2 MiB segments: the second of two 1 MiB requests fills
    # the first's segment and calls nothing, so it is made untimed.
    request, fills = (MiB, 2) if segment == SMALL_SEGMENT else (segment, 1)
    allocs: list[float] = []
    frees: list[float] = []
    for round_ in range(ROUNDS + 1):
        cuda.empty_cache()
        base, before = cuda.memory_reserved(), _counts(cuda)
        pointers, timed = [], []
        for _ in range(PER_ROUND):
            cuda.synchronize()
            micros, pointer = _timed(lambda: cuda.caching_allocator_alloc(request))
            timed.append(micros)
            pointers += [pointer] + [cuda.caching_allocator_alloc(request) for _ in range(fills - 1)]
        _expect(cuda, before, (PER_ROUND, 0), base + PER_ROUND * segment, f"{PER_ROUND} cudaMalloc of {segment} B")
        for pointer in pointers:
            cuda.caching_allocator_delete(pointer)
        cuda.synchronize()
        micros, _ = _timed(cuda.empty_cache)
        _expect(cuda, before, (PER_ROUND, PER_ROUND), base, f"{PER_ROUND} cudaFree of {segment} B")
        if round_:
            allocs += timed
            frees.append(micros / PER_ROUND)
    return allocs, frees


def _syncs(torch) -> list[float]:
    torch.cuda.synchronize()
    return [_timed(torch.cuda.synchronize)[0] for _ in range(SYNCS)]


def _expandable(torch) -> dict[str, CostFit]:
    """One growth (segment_map) and one release (segment_unmap) per round at each size: the allocator maps the
    shortfall rounded up to whole pages, and empty_cache unmaps every free page of a segment at once."""
    maps, unmaps = [], []
    for size in _sizes(torch, 1):
        request = MiB if size == SMALL_SEGMENT else size
        map_us, unmap_us, mapped = [], [], set()
        for round_ in range(ROUNDS + 1):
            # The warm-up round (which also reserves the segment's address range) is checked against the memory
            # history: exactly one segment_map and one segment_unmap. The history would slow the timed rounds.
            with _history(torch, round_ == 0):
                grown, micros, unmapped = _grow_and_release(torch.cuda, request)
            if round_:
                map_us.append(micros)
                unmap_us.append(unmapped)
                mapped.add(grown)
        if len(mapped) != 1 or min(mapped) < request:
            raise Unmeasured(f"a request of {request} B mapped {sorted(mapped)} B in different rounds")
        (grown,) = mapped
        maps.append(summarise(grown, map_us))
        unmaps.append(summarise(grown, unmap_us))
    return _on_a_busy_device(torch, {"map": fit(maps), "unmap": fit(unmaps)}, native=False)


def _grow_and_release(cuda, request: int) -> tuple[int, float, float]:
    """The bytes one request of `request` mapped, the microseconds that took, and those of unmapping them."""
    cuda.empty_cache()
    base = cuda.memory_reserved()
    cuda.synchronize()
    micros, pointer = _timed(lambda: cuda.caching_allocator_alloc(request))
    grown = cuda.memory_reserved() - base
    expandable = [s.get("is_expandable") for s in cuda.memory_snapshot() if s.get("allocated_size", 0) >= request]
    if not expandable or not all(expandable):
        raise Unmeasured("expandable segments are not on in this process (its segments are not expandable)")
    cuda.caching_allocator_delete(pointer)
    cuda.synchronize()
    unmapped, _ = _timed(cuda.empty_cache)
    if cuda.memory_reserved() != base:
        raise Unmeasured(f"empty_cache left {cuda.memory_reserved() - base} B of the {grown} B mapped for a "
                       f"request of {request} B")
    return grown, micros, unmapped


@contextlib.contextmanager
def _history(torch, check: bool) -> Iterator[None]:
    """With `check`, the memory history on around the block, which must have made one segment_map and one
    segment_unmap."""
    if not check:
        yield
        return
    memory = torch.cuda.memory
    memory._record_memory_history("all", context=None, max_entries=10_000)
    try:
        before = _actions(memory)
        yield
        after = _actions(memory)
    finally:
        memory._record_memory_history(None)
    moved = {a: after.get(a, 0) - before.get(a, 0) for a in ("segment_map", "segment_unmap")}
    if moved != {"segment_map": 1, "segment_unmap": 1}:
        raise Unmeasured(f"expected one segment_map and one segment_unmap, the memory history has {moved}")


def _actions(memory) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trace in memory._snapshot()["device_traces"]:
        for entry in trace:
            counts[entry["action"]] = counts.get(entry["action"], 0) + 1
    return counts


def _on_a_busy_device(torch, fits: dict[str, CostFit], native: bool) -> dict[str, CostFit]:
    """`fits` with each kind's `BusyFit`: at each size its idle fit was measured at, a new segment (a cudaMalloc, or
    a map of pages) and its release in empty_cache (a cudaFree, or an unmap), timed behind queued GPU work. Each
    growth must move the reserved bytes by what its idle measurement did (checked untimed)."""
    cuda, base = torch.cuda, [0]
    held: list[int] = []

    def emptied() -> None:
        cuda.empty_cache()
        base[0] = cuda.memory_reserved()

    def released(moves: int) -> None:
        grown = cuda.memory_reserved() - base[0]
        while held:
            cuda.caching_allocator_delete(held.pop())
        if grown != moves:
            raise Unmeasured(f"a growth behind queued work reserved {grown} B, not the {moves} B it did on an idle "
                             f"device")

    def grow(request: int) -> None:
        held.append(cuda.caching_allocator_alloc(request))

    def cached(request: int, moves: int) -> None:   # a segment (or pages) held in the cache, for empty_cache
        emptied()
        grow(request)
        released(moves)

    queue, out = _spinner(torch), dict(fits)
    for grows, frees in (("device_alloc", "device_free"),) if native else (("map", "unmap"),):
        growth, freed = [], []
        for sample in fits[grows].samples:
            request, moves = (MiB if sample.bytes == SMALL_SEGMENT else sample.bytes), sample.bytes
            growth.append(Queued(moves, emptied, partial(grow, request), partial(released, moves)))
            freed.append(Queued(moves, partial(cached, request, moves), cuda.empty_cache, None))
        out[grows] = replace(fits[grows], busy=busy_fit(_queued(cuda, queue, growth)))
        out[frees] = replace(fits[frees], busy=busy_fit(_queued(cuda, queue, freed)))
    return out


def _spinner(torch) -> Callable[[float], None]:
    """queue(ms): about `ms` of GPU work queued on the current stream (torch.cuda._sleep spins the GPU for a number
    of clock cycles: how many make a millisecond is timed here, the kernel's first launch untimed)."""
    cuda, cycles = torch.cuda, 20_000_000
    for _ in range(2):
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        cuda._sleep(cycles)
        end.record()
        end.synchronize()
    per_ms = cycles / start.elapsed_time(end)
    return lambda ms: cuda._sleep(int(ms * per_ms))


@dataclass(frozen=True)
class Queued:
    """One call to time behind queued work: `setup` on an idle device, then `call` timed; `after` undoes it,
    untimed. `nbytes`: the size it is a sample of."""

    nbytes: int
    setup: Callable[[], Any]
    call: Callable[[], Any]
    after: Callable[[], Any] | None


def _queued(cuda, queue: Callable[[float], None], calls: list[Queued]) -> list[tuple[int, list[list[float]]]]:
    """Each of `calls` timed behind each depth of QUEUED_MS of GPU work, QUEUED_ROUNDS times after a warm-up round:
    per call, (nbytes, its times at each depth). The sizes take turns round by round, so that a hiccup of the host
    lasting a few rounds costs every size a round, not one size all of them."""
    times: list[list[list[float]]] = [[[] for _ in QUEUED_MS] for _ in calls]
    for depth, ms in enumerate(QUEUED_MS):
        for round_ in range(QUEUED_ROUNDS + 1):
            for timed, c in zip(times, calls):
                c.setup()
                cuda.synchronize()
                queue(ms)
                micros, _ = _timed(c.call)
                cuda.synchronize()
                if c.after is not None:
                    c.after()
                if round_:
                    timed[depth].append(micros)
    return [(c.nbytes, timed) for c, timed in zip(calls, times)]


def busy_fit(measured: list[tuple[int, list[list[float]]]], queued_ms: tuple[float, float] = QUEUED_MS) -> BusyFit:
    """One kind's times behind two depths of queued work, at each size, as its fit on a busy device. The share of
    the queued work it waits for is one slope for the kind (the median of the sizes' slopes between the depths'
    medians: a call that synchronises waits for all of it at any size); its own cost at a size is its times at the
    shallower depth less the slope times that depth (the slope unclipped there, so that a depth the GPU ran a little
    longer or shorter than asked cancels out)."""
    d0, d1 = (ms * 1e3 for ms in queued_ms)
    slope = statistics.median((statistics.median(t[1]) - statistics.median(t[0])) / (d1 - d0) for _, t in measured)
    samples = [summarise(nbytes, [max(0.0, t - slope * d0) for t in times[0]]) for nbytes, times in measured]
    line = fit(samples)
    return BusyFit(fixed_us=line.fixed_us, per_mib_us=line.per_mib_us, samples=samples,
                   waits=min(1.0, max(0.0, slope)), queued_us=[d0, d1])


def _counts(cuda) -> tuple[int, int]:
    stats = cuda.memory_stats()
    return stats.get("num_device_alloc", 0), stats.get("num_device_free", 0)


def _expect(cuda, before: tuple[int, int], calls: tuple[int, int], reserved: int, what: str) -> None:
    """The driver calls since `before` are `calls` (cudaMalloc, cudaFree) and the reserved bytes are `reserved`,
    or Unmeasured saying what was expected and what happened."""
    after = _counts(cuda)
    moved = (after[0] - before[0], after[1] - before[1])
    now = cuda.memory_reserved()
    if moved != calls or now != reserved:
        raise Unmeasured(f"expected {what}: memory_stats counted {moved[0]} cudaMalloc and {moved[1]} cudaFree, "
                       f"reserved {now} B where {reserved} B was expected")


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter_ns()
    result = call()
    return (time.perf_counter_ns() - start) / 1e3, result


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
