"""A PyTorch snapshot's trace entries of one device as a trace's events (`trace.Trace`'s columns and meta).

- `alloc` and `free_completed` are the requests (a block returns to its pool at `free_completed`, not
  `free_requested`: a `record_stream`ed block waits for other streams); allocations are numbered in order and a
  free names the allocation it returns. A free of a block allocated before the recording started is dropped and
  counted (`dropped_frees`, `dropped_free_bytes`, with a warning).
- `free_requested` is where the program let go of the block: torch counts it out of `allocated_bytes` there
  (`free`), and out of `active_bytes` and `requested_bytes` only at `free_completed` (`free_block`). The two
  entries follow each other unless the block was used on another stream (`record_stream`, or autograd
  accumulating a gradient on the stream of its `AccumulateGrad`): then the completion waits for that stream's
  work (`insert_events`, seen at a later request), or, when the free came during a CUDA graph capture, for the
  first request after every capture ended (`needs_events_deferred_until_no_capture`). A request whose
  completion comes after an allocation becomes a FREE_REQUESTED event of that allocation, placed before it (only
  allocations raise the peaks).
- `oom` (no `addr`: nothing was allocated) is counted (`recorded_ooms`); allocations after one make the trace
  allocation-order dependent (a warning). The request that failed last, when no allocation followed it (a snapshot
  taken at the OOM, as `alloctune.dump_on_oom` takes it), is replayed as the trace's last allocation, never freed:
  under the recorded setting the replay then fails where the run did, and another setting fits only if it would
  have served that request too (`meta["failed_request_bytes"]`; `diagnose` replays the same request).
- A run of `segment_free` / `segment_unmap` entries is a release of cached memory. The job's own call
  (`torch.cuda.empty_cache()`, its own or a library's) becomes an `EMPTY_CACHE` event, which the replay performs
  under every setting; a release the allocator made by itself inside a request (garbage collection, the oversize
  release, the retry before an OOM) does not, since the replay makes those itself. The allocator releases by itself
  only inside a request that needs new memory, so a release followed by anything but new memory for the next
  request (a segment or pages, or an OOM) is a call; one followed by new memory is a call only where the
  recording's settings (`allocator_settings`) neither collect garbage nor release oversize blocks. A retry on a full
  device, followed by new memory, would also be taken for a call there; an `empty_cache` that found nothing cached
  to release leaves no entry, and is not replayed.
- Step ends: `meta["step_ends_us"]` (the Unix time in µs the start-up hook or the trial child noted at the end of
  each step) become `meta["step_ends"]`, placed among the events by their entries' `time_us` (the same clock):
  `step_ends[k]` is the number of events up to the end of step k.
- CUDA graphs: the recording's captures (`meta["pool_events"]`, placed by time: `captures.py`) become POOL_BEGIN,
  POOL_END and POOL_RELEASE events of a pool number (its index in `meta["pools"]`, the pool ids in order, plus 1);
  an allocation in a private pool gets the stream index of its (stream, pool), announced by a POOL_STREAM event
  before its first allocation, and a capture that `torch.cuda.graph` began after emptying the cache gets an
  EMPTY_CACHE before it (one the recording's release did not already show). A pool seen only in entries' `pool_id`
  (a snapshot recorded without alloctune) is taken as kept from its first allocation to the end, with a warning.
- `segment_alloc`, `segment_map`, `snapshot` and unknown actions are not requests and are skipped.
"""
from __future__ import annotations

import numpy as np

from ..errors import TraceError, shown
from ..units import MAX_SIZE, format_bytes
from .captures import DEFAULT_POOL, Captures
from .limits import INT64, MAX_EVENTS, is_int

ALLOC, FREE, EMPTY_CACHE = 0, 1, 2
POOL_BEGIN, POOL_END, POOL_RELEASE, POOL_STREAM = 3, 4, 5, 6   # CUDA graphs' private pools: sim/pools.py
FREE_REQUESTED = 7   # the program freed the block, which returns to its pool only at its FREE
LAST_KIND = FREE_REQUESTED
ORDER_DEPENDENT = ("allocation-order dependent: what the workload asks for depends on free memory or the setting, "
                   "so a replay under other settings may not match them")
_RELEASES = ("segment_free", "segment_unmap")
_NEW_MEMORY = ("segment_alloc", "segment_map")


class _Events:
    """The events read so far, and what reading the entries found."""

    def __init__(self, where: str, settings_release: bool, captures: Captures):
        self.where = where
        self.captures = captures
        self.pools: dict[tuple, int] = {}        # private pool id -> its number (1, 2, ...)
        self.begun: set[int] = set()             # pool numbers a capture began
        self.unbegun_pools = 0                   # pools seen in entries only
        self.columns: Columns = ([], [], [], [])
        self.times: list = []                   # each event's entry's time_us
        self.live: dict[int, int] = {}          # recorded address -> allocation id
        self.requested: dict[int, tuple[int, dict]] = {}   # address -> (allocation id, entry): freed, not placed
        self.alloc_size: list[int] = []         # per allocation id
        self.alloc_stream: list[int] = []
        self.stream_keys: dict[tuple, int] = {}  # (stream, *pool_id) -> index
        self.dropped = self.dropped_bytes = self.ooms = self.empty_caches = 0
        self.allocs_after_oom = False
        self.failed: tuple[int, dict] | None = None   # the last OOM's entry, while no allocation came after it
        self.settings_release = settings_release   # the recording's allocator may release inside a request
        self.released: dict | None = None           # the first entry of a release not yet told apart
        self.then_new_memory = False                # new memory came after that release

    def entry(self, n: int, e: dict) -> None:
        for event in self.captures.due(e.get("time_us")):
            self.pool_event(event)
        action = e.get("action")
        if action in _RELEASES:
            self.released = self.released or e
        elif action in _NEW_MEMORY:
            self.then_new_memory |= self.released is not None
        elif action in ("alloc", "free_completed", "oom"):
            self.request(n, e, action)
        elif action == "free_requested":
            self.free_requested(n, e)

    def request(self, n: int, e: dict, action: str) -> None:
        size, addr = e.get("size"), e.get("addr")
        if not is_int(size, 0, MAX_SIZE) or (action != "oom" and not is_int(addr, -INT64, INT64 - 1)):
            needs = "an integer 'size' from 0 to 8 EiB" + ("" if action == "oom" else " and an integer 'addr'")
            raise _bad_entry(self.where, n, action, needs, e)
        if action == "free_completed" and isinstance(addr, int):
            self.requested.pop(addr, None)   # not placed yet: its FREE does both
        self.end_release(action == "oom" or self.then_new_memory and self.settings_release)
        if action == "oom":  # the request failed: nothing was allocated
            self.ooms += 1
            self.failed = (n, e)
        elif action == "alloc":
            assert isinstance(addr, int)
            self.alloc(n, e, size, addr)
        else:
            assert isinstance(addr, int)
            freed = self.live.pop(addr, None)
            if freed is None:  # allocated before the recording started
                self.dropped += 1
                self.dropped_bytes += size
            else:
                self.add((FREE, freed, self.alloc_size[freed], self.alloc_stream[freed]), e)

    def alloc(self, n: int, e: dict, size: int, addr: int | None) -> None:
        """An allocation at `addr`; None: the failed request, replayed last and never freed."""
        if addr in self.live:
            raise TraceError(f"{self.where!r}: trace entry {n} allocates address {addr:#x}, which is still in use "
                             f"(allocated earlier and never freed): the trace is corrupt")
        if addr is not None:
            self.allocs_after_oom |= self.ooms > 0
            self.failed = None
        pool = self.captures.route(e)
        key = (e.get("stream", 0), *pool)
        if not all(is_int(k, -INT64, INT64 - 1) for k in key):
            raise _bad_entry(self.where, n, "alloc", "an integer 'stream' and 'pool_id'", e)
        stream = self.stream_keys.get(key)
        if stream is None:
            stream = self.stream_keys[key] = len(self.stream_keys)
            if pool != DEFAULT_POOL:
                self.in_pool(pool, stream, e)
        ident = len(self.alloc_size)
        if addr is not None:
            self.live[addr] = ident
        self.alloc_size.append(size)
        self.alloc_stream.append(stream)
        self.add((ALLOC, ident, size, stream), e)

    def free_requested(self, n: int, e: dict) -> None:
        """The program freed a block: kept aside, and placed as a FREE_REQUESTED only if an allocation comes before
        its completion (`place_requests`). A block allocated before the recording started is its completion's to
        count."""
        addr = e.get("addr")
        if not is_int(addr, -INT64, INT64 - 1):
            raise _bad_entry(self.where, n, "free_requested", "an integer 'addr'", e)
        ident = self.live.get(addr)
        if ident is not None:
            self.requested[addr] = (ident, e)

    def place_requests(self) -> None:
        """The frees requested and not completed, as FREE_REQUESTED events here (before the allocation that
        follows, or at the end)."""
        requested, self.requested = self.requested, {}
        for ident, e in requested.values():
            self.append((FREE_REQUESTED, ident, self.alloc_size[ident], self.alloc_stream[ident]), e)

    def pool_event(self, event: dict) -> None:
        """A capture's begin, end or release (`captures.py`) as the simulator's pool event."""
        self.end_release(False)   # a release before it was the job's: the allocator releases only inside a request
        number = self.number(tuple(event["pool"]))
        if event["action"] == "begin":
            if event.get("empty_cache") and (not self.columns[0] or self.columns[0][-1] != EMPTY_CACHE):
                self.empty_caches += 1
                self.add((EMPTY_CACHE, -1, 0, 0), event)
            self.begun.add(number)
        self.add(({"begin": POOL_BEGIN, "end": POOL_END, "release": POOL_RELEASE}[event["action"]], number, 0, 0), event)

    def in_pool(self, pool: tuple, stream: int, e: dict) -> None:
        """Stream index `stream` allocates in private pool `pool`; a pool no capture began is kept to the end."""
        number = self.number(pool)
        if number not in self.begun:
            self.begun.add(number)
            self.unbegun_pools += 1
            self.add((POOL_BEGIN, number, 0, 0), e)
            self.add((POOL_END, number, 0, 0), e)
        self.add((POOL_STREAM, number, 0, stream), e)

    def number(self, pool: tuple) -> int:
        return self.pools.setdefault(pool, len(self.pools) + 1)

    def end_release(self, own: bool) -> None:
        """A request (or the end) after a release: the release becomes the job's empty_cache unless `own`."""
        released, self.released, self.then_new_memory = self.released, None, False
        if released is not None and not own:
            self.empty_caches += 1
            self.add((EMPTY_CACHE, -1, 0, 0), released)

    def add(self, event: tuple[int, int, int, int], e: dict) -> None:
        if self.requested and event[0] == ALLOC:
            self.place_requests()
        self.append(event, e)

    def append(self, event: tuple[int, int, int, int], e: dict) -> None:
        if len(self.times) == MAX_EVENTS:
            raise TraceError(f"{self.where!r} holds more than {MAX_EVENTS:,} allocation events, the most "
                             f"alloctune replays")
        for column, value in zip(self.columns, event):
            column.append(value)
        self.times.append(e.get("time_us"))


Columns = tuple[list[int], list[int], list[int], list[int]]   # kinds, addrs, sizes, streams


def from_entries(entries: list[dict], meta: dict, where: str, device: int = 0) -> tuple[Columns, dict]:
    """The events of `entries` (kinds, addrs, sizes, streams) of `device` and `meta` with what reading them found."""
    pool_events = meta.pop("pool_events", None) or []
    timed = all(is_int(e.get("time_us"), 0, INT64 - 1) for e in entries)
    events = _Events(where, _settings_release(meta.get("allocator_settings")),
                     Captures(pool_events if timed else [], device, where))
    for n, e in enumerate(entries):
        events.entry(n, e)
    if events.failed is not None:   # the snapshot ends at an OOM: its request is the last allocation
        n, e = events.failed
        events.alloc(n, e, e["size"], None)
    events.end_release(events.then_new_memory and events.settings_release)
    for event in events.captures.due(None):
        events.pool_event(event)
    events.place_requests()   # frees still waiting for their completion when the snapshot was taken
    meta = {**_placed_steps(meta, events.times), "streams": [list(k) for k in events.stream_keys],
            "pools": [list(p) for p in events.pools],
            "dropped_frees": events.dropped, "dropped_free_bytes": events.dropped_bytes,
            "recorded_ooms": events.ooms, "failed_request_bytes": events.failed[1]["size"] if events.failed else 0,
            "live_at_end": len(events.live), "empty_cache_calls": events.empty_caches}
    warnings = _entry_warnings(meta, events.allocs_after_oom)
    if pool_events and not timed:
        warnings.append("the entries carry no time_us (torch before 2.1): the recording's CUDA graph captures cannot "
                        "be placed among them, and their allocations are replayed as if in the default pools")
    if events.unbegun_pools:
        warnings.append(f"{events.unbegun_pools} CUDA graph pool(s) appear in the entries' pool ids but no capture of "
                        f"them was recorded (a snapshot taken without alloctune): each is taken as kept from its first "
                        f"allocation to the end, and the release-and-retry before an OOM as possible throughout")
    return events.columns, dict(meta, warnings=warnings)


def _settings_release(settings: object) -> bool:
    """Whether the recording's allocator settings let it release cached memory inside a request by itself (garbage
    collection, the oversize release); True when the snapshot does not say."""
    if not isinstance(settings, dict):
        return True
    return bool(settings.get("garbage_collection_threshold")) or settings.get("max_split_size") not in (-1, None)


def _placed_steps(meta: dict, times: list) -> dict:
    """`meta` with `step_ends_us` placed among the events as `step_ends`; entries without a time (torch before 2.1)
    place nothing."""
    ends_us = meta.pop("step_ends_us", None)
    if not ends_us or not all(is_int(t, 0, INT64 - 1) for t in times):
        return meta
    clock = np.maximum.accumulate(np.asarray(times, dtype=np.int64)) if times else np.zeros(0, dtype=np.int64)
    return {**meta, "step_ends": np.searchsorted(clock, np.asarray(ends_us), side="right").tolist()}


def _bad_entry(where: str, n: int, action: str, needs: str, entry: dict) -> TraceError:
    return TraceError(f"{where!r}: trace entry {n} ({action}) needs {needs}, got {shown(entry, 200)}")


def _entry_warnings(meta: dict, allocs_after_oom: bool) -> list[str]:
    """The trace's warnings, with what reading its entries found: frees of blocks from before the recording, and
    allocations after an OOM (then what was asked for depended on what was free)."""
    warnings = list(meta.get("warnings", []))
    if meta["dropped_frees"]:
        warnings.append(f"{meta['dropped_frees']} frees of blocks allocated before the recording started were dropped "
                        f"({format_bytes(meta['dropped_free_bytes'])} live before the trace are missing from the "
                        f"replay)")
    if allocs_after_oom:
        warnings.append(ORDER_DEPENDENT + f": the recorded run hit {meta['recorded_ooms']} OOM(s) and went on "
                        f"allocating")
    return warnings
