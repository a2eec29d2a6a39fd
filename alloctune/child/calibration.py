"""The calibration child: `PYTHON -m alloctune.child.calibration native|expandable` times, on an idle GPU and
through torch's own caching allocator, the driver calls that allocator makes; the parent (calibration.py) runs it
once per mode, `expandable` under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (a process has one allocator
configuration), and builds the `Calibration` from the two answers.

native: cudaMalloc and cudaFree of whole segments of 2 MiB (the small pool's), 20 MiB, 128 MiB and 1 GiB, and an
idle torch.cuda.synchronize(). expandable: growing by whole pages (a `segment_map`) and releasing them (a
`segment_unmap`), at the same sizes. Every timed call is checked to be the driver call it is said to be:
`memory_stats` num_device_alloc / num_device_free and the reserved bytes must move by exactly what it should, or
the child stops with what it saw. The device is synchronised before each timed call, so nothing queued is waited
for: these are the calls' own costs. Then each kind is timed again, at one size, behind two depths of GPU work
queued on purpose (`Queued`): how much of the queued work it waits for (a cudaFree, an unmap and a synchronisation
wait for all of it; a cudaMalloc or a map, on some drivers, for none) and what a busy device adds to its price.
How much work is queued when a job makes the call is the job's (decide/speed.py).

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
from typing import Any, Callable, Iterator

from ..results.calibration import MiB, CostFit, CostSample, Queued
from .provenance import driver_version

MARK = "ALLOCTUNE-CALIBRATION "
NO_GPU_EXIT = 3
SEGMENTS = (2 * MiB, 20 * MiB, 128 * MiB, 1024 * MiB)
ROUNDS = 8          # repeats of each size (one warm-up round before them is not kept)
PER_ROUND = 4       # native segments allocated before one empty_cache frees them all, as empty_cache usually does
SYNCS = 200
SMALL_SEGMENT = 2 * MiB   # the small pool's segment, which holds requests of at most 1 MiB
# Each kind is also timed behind this much GPU work queued (ms), at one size: how much of the work a call waits
# for (the slope between the two depths) is what it costs inside a running job beyond its idle price.
QUEUED_MS = (2.0, 10.0)
QUEUED_ROUNDS = 8
QUEUED_SIZE = 20 * MiB


@dataclass(frozen=True)
class Facts:
    """What the costs depend on, as the child saw it."""

    gpu: str
    driver: str | None
    cuda: str | None
    torch: str


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
    """Least squares through the medians, microseconds against MiB. Neither term may be negative: a falling line
    (sizes that cost the same, and noise) is a flat one at their mean; a line that would cross zero above 0 MiB
    goes through the origin instead."""
    xs = [s.bytes / MiB for s in samples]
    ys = [s.median_us for s in samples]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else 0.0
    if slope <= 0:
        return CostFit(fixed_us=mean_y, per_mib_us=0.0, samples=samples)
    fixed = mean_y - slope * mean_x
    if fixed < 0:
        return CostFit(fixed_us=0.0, per_mib_us=sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs),
                       samples=samples)
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
                 torch=str(torch.__version__))


def _native(torch) -> dict[str, CostFit]:
    allocs, frees = [], []
    for segment in _sizes(torch, PER_ROUND):
        alloc_us, free_us = _segments(torch, segment)
        allocs.append(summarise(segment, alloc_us))
        frees.append(summarise(segment, free_us))
    fits = {"device_alloc": fit(allocs), "device_free": fit(frees), "sync": fit([summarise(0, _syncs(torch))])}
    return _behind_queued(torch, fits, native=True)


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
    return _behind_queued(torch, {"map": fit(maps), "unmap": fit(unmaps)}, native=False)


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


def _behind_queued(torch, fits: dict[str, CostFit], native: bool) -> dict[str, CostFit]:
    """`fits` with each kind also timed behind queued GPU work (`Queued`), at QUEUED_SIZE: a new segment (a
    cudaMalloc, or a map of pages) and its release in empty_cache (a cudaFree, or an unmap), and a
    synchronisation, which must wait for all of it."""
    cuda, held = torch.cuda, []
    grow = lambda: held.append(cuda.caching_allocator_alloc(QUEUED_SIZE))   # noqa: E731
    cached = lambda: (cuda.empty_cache(), grow(), cuda.caching_allocator_delete(held.pop()))   # noqa: E731
    release = lambda: [cuda.caching_allocator_delete(held.pop()) for _ in list(held)]   # noqa: E731
    if native:
        calls = {"device_alloc": (cuda.empty_cache, grow, release), "device_free": (cached, cuda.empty_cache, None),
                 "sync": (None, cuda.synchronize, None)}
    else:
        calls = {"map": (cuda.empty_cache, grow, release), "unmap": (cached, cuda.empty_cache, None)}
    queue = _spinner(torch)
    out = {}
    for kind, (setup, call, after) in calls.items():
        idle = fits[kind].fixed_us + fits[kind].per_mib_us * (0 if kind == "sync" else QUEUED_SIZE / MiB)
        out[kind] = replace(fits[kind], queued=_queued(cuda, queue, setup, call, after, idle))
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


def _queued(cuda, queue: Callable[[float], None], setup: Callable[[], Any] | None, call: Callable[[], Any],
            after: Callable[[], Any] | None, idle_us: float) -> Queued:
    """`call` timed behind each depth of QUEUED_MS of GPU work, after `setup` on an idle device, QUEUED_ROUNDS
    times after a warm-up round; `after` undoes it, untimed. Its wait is the slope of its median time in the depth."""
    medians = []
    for ms in QUEUED_MS:
        times = []
        for round_ in range(QUEUED_ROUNDS + 1):
            if setup is not None:
                setup()
            cuda.synchronize()
            queue(ms)
            micros, _ = _timed(call)
            cuda.synchronize()
            if after is not None:
                after()
            if round_:
                times.append(micros)
        medians.append(statistics.median(times))
    depths = [ms * 1e3 for ms in QUEUED_MS]
    waits = min(1.0, max(0.0, (medians[1] - medians[0]) / (depths[1] - depths[0])))
    return Queued(waits=waits, extra_us=medians[0] - waits * depths[0] - idle_us, queued_us=depths,
                  median_us=medians)


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
