"""Allocation traces: load PyTorch memory snapshots safely, and keep traces in a compact file of our own.

A `Trace` is the sequence of requests the caching allocator saw on one device, as parallel lists
(`kinds`, `addrs`, `sizes`, `streams`) that the simulator reads directly:

- `kinds[i]` is `ALLOC` (0), `FREE` (1), `EMPTY_CACHE` (2: the job released the cache, `entries.py` says how
  that is told from the allocator's own releases; its addr is -1, its size 0) or a CUDA graph pool event
  (`POOL_BEGIN`, `POOL_END`, `POOL_RELEASE`, `POOL_STREAM`: 3-6, `pools.py`; its addr is the pool number, its size
  0, and a POOL_STREAM's stream the stream index that allocates in that pool), or `FREE_REQUESTED` (7: the
  program freed a block whose return to its pool waits for another stream's work, its FREE later: `entries.py`).
- `addrs[i]` is the allocation's id: allocations are numbered 0, 1, 2, ... in trace order, and a free (or a
  FREE_REQUESTED) carries the id of the allocation it returns. Real addresses are not kept: the simulator places blocks
  itself, and ids cannot be confused when the recorded run reused an address.
- `sizes[i]` is the size the program requested (before rounding), for frees the size of that allocation.
- `streams[i]` is a small stream index; `meta["streams"]` lists what each index was in the recording,
  `[stream, *pool_id]` (pool (0, 0) = the default pools). A block allocated in a private pool (CUDA graphs,
  `MemPool`) gets its own index, which a POOL_STREAM event puts in that pool.

`meta` keys that replay reads when present: `torch_version` (the simulator follows that version's behaviour),
`device_total_bytes` (the recording GPU's memory: replay's default device memory), `overhead_bytes` (what the
CUDA context held outside the allocator), `measured` (a list of {conf, peak_reserved_bytes,
peak_allocated_bytes, ..., alloc_digest} measured on the GPU in fresh processes), `allocator_settings`, `env`,
`step_ends` and `warmup_steps` (the steps the driver work per steady step is counted over: `steady.py`).
Loading adds `source`, `streams`, `dropped_frees`, `dropped_free_bytes`, `recorded_ooms`, `live_at_end`,
`empty_cache_calls`, `step_ends` (from the recording's `step_ends_us`), `pools` (the CUDA graph pools, from its
`pool_events` and the entries' pool ids: `entries.py`) and `warnings` (a list of strings to show
the user, each distinct one once with how often it came: `distinct_warnings`).

Two file formats, told apart by content, not by name:

1. **PyTorch snapshot pickles** as `torch.cuda.memory._dump_snapshot` writes them (torch >= 2.1): a dict with
   `device_traces` (one list of entries per device), `segments` and, on recent versions,
   `allocator_settings`, read without running anything (`pickles.py`). `alloctune record` adds an `alloctune`
   dict (ignored by pytorch.org/memory_viz); its keys go into `Trace.meta`.
2. **The compact format** (`save_trace`; the bytes are `compact.py`'s): an xz stream holding one JSON header
   line followed by little-endian arrays: event kinds, the sizes and stream indexes of the allocations, and for
   each free how many allocations back its block was made; a million events take a few MB. An unknown format
   name or version is refused (version 2 added empty_cache events, version 3 pool events, version 4 FREE_REQUESTED;
   older files read as they were).

What loading does with the awkward parts of real traces, on purpose:

- truncated or corrupt file, not a dict of the expected shape, an entry missing `action`/`addr`/`size`:
  `TraceError` naming the file (and the entry).
- no allocations on any device (recording never enabled, or an empty run): `TraceError`.
- several devices: the one with allocations is taken; if several have them, `device=` must choose, else
  `TraceError` listing them.
- several streams: kept, one index each (the simulator pools per stream).
- a snapshot's entries (frees of blocks from before the recording, OOMs, releases of the cache, step ends):
  `entries.py`.
- When allocations follow an OOM the program caught it and went on, so what it asked for depended on free
  memory: `meta["warnings"]` says the trace looks allocation-order dependent. The same warning is given when `meta["measured"]` holds an `alloc_digest` (see `alloc_digest`) from a run
  under another setting whose allocation sequence differs from this trace's.
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import OptionText, TraceError, shown
from ..results.provenance import provenance
from ..results.records import Budget, Bytes, Conf, Count, Rate, Seconds
from ..results.typed import FieldError, check_plain, from_json
from ..files import checked_path
from ..units import format_bytes
from .compact import XZ_MAGIC, read_compact, write_compact
from .entries import (ALLOC, EMPTY_CACHE, FREE, FREE_REQUESTED, LAST_KIND, ORDER_DEPENDENT, POOL_BEGIN, POOL_END,
                      POOL_RELEASE, POOL_STREAM, Columns, from_entries)  # the event kinds here too
from .limits import INT64, MAX_MEASURED, MAX_WARNINGS, is_int, open_trace
from .pickles import PICKLE_PROTO, unpickle_snapshot
from .rebuilt import Reconstruction, allowed_at_oom, at_oom, overhead_at_oom, reconstruct



@dataclass
class Trace:
    """One device's allocation requests in order; see the module docstring for the encoding."""

    kinds: list[int]
    addrs: list[int]
    sizes: list[int]
    streams: list[int]
    device: int = 0
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.kinds)

    def __repr__(self) -> str:   # its counts, not its events: a notebook shows a result's repr, a trace's in megabytes
        return (f"Trace(events={len(self)}, allocs={self.num_allocs}, device={self.device}, "
                f"torch_version={self.meta.get('torch_version')!r})")

    @property
    def num_allocs(self) -> int:
        return int(np.count_nonzero(np.asarray(self.kinds) == ALLOC))

    @property
    def warnings(self) -> list[str]:
        return self.meta.get("warnings", [])


def alloc_digest(trace: Trace) -> str:
    """Digest of the allocation sizes in order: equal digests = the workload asked for the same memory.

    `alloctune record` can store it with each measured setting; a mismatch means the workload's requests
    depend on the setting (autotuning, free-memory checks) and a replay of one trace is not sound for all.
    """
    sizes = np.asarray([s for k, s in zip(trace.kinds, trace.sizes) if k == ALLOC], dtype="<i8")
    return hashlib.sha256(sizes.tobytes()).hexdigest()[:16]


def is_trace_file(path: str | os.PathLike) -> bool:
    """Whether `path` is a regular file in one of the two formats `load_trace` reads, told as it tells them: by its
    first bytes (an xz stream, a pickle), not by its name. For a command that was given a trace where it takes
    something else (a workload, a program to run)."""
    try:
        if not os.path.isfile(path):   # a FIFO or a device is never read here
            return False
        with open(path, "rb") as f:
            head = f.read(len(XZ_MAGIC))
    except (OSError, ValueError):
        return False
    return head == XZ_MAGIC or head[:1] == bytes([PICKLE_PROTO])


def load_trace(path: str | os.PathLike, device: int | None = None) -> Trace:
    """Load a PyTorch snapshot pickle or a compact alloctune trace (see the module docstring); '-' reads stdin.
    Both are read as a stream, within MAX_SNAPSHOT_BYTES and MAX_EVENTS."""
    where = checked_path(path, "a trace")
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise TraceError(f"device: expected a CUDA device index (0, 1, ...), got {shown(device)}")
    with open_trace(where, "a trace") as f:
        head = f.read(len(XZ_MAGIC))
        if not head:
            raise TraceError(f"{where!r} is empty: neither a PyTorch memory snapshot (pickle) nor an "
                             f"alloctune trace (xz)")
        if head == XZ_MAGIC:
            trace = _load_compact(head, f, where)
            if device is not None and device != trace.device:
                raise TraceError(f"{where!r} holds device {trace.device} only, not device {device}")
        elif head[:1] == bytes([PICKLE_PROTO]):
            trace = _load_snapshot(unpickle_snapshot(head, f, where), where, device)
        else:
            raise TraceError(f"{where!r} is neither a PyTorch memory snapshot (pickle) nor an "
                             f"alloctune trace (xz): it starts with {head!r}")
    if (ends := trace.meta.get("step_ends")) and ends[-1] > len(trace):
        raise TraceError(f"{where!r} is corrupt: its step ends run past its {len(trace)} events")
    _check_order_dependence(trace)
    return trace


# ---- PyTorch snapshot pickles ----

class SeveralDevices(TraceError):
    """A snapshot with allocations on several devices, none chosen: the caller's option that chooses one is named
    as an option (`{device=N}`: the flag of every command that loads traces); `devices` lists them."""

    def __init__(self, where: str, devices: list[int]) -> None:
        super().__init__(OptionText("{where!r} has allocations on devices {devices}: choose one with {device=N}",
                                    where=where, devices=devices))
        self.where, self.devices = where, devices


def _load_snapshot(snapshot: dict, where: str, device: int | None) -> Trace:
    traces = snapshot["device_traces"]
    for i, entries in enumerate(traces):
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TraceError(f"{where!r}: device_traces[{i}] is not a list of trace entries (dicts)")
    with_allocs = [i for i, entries in enumerate(traces) if any(e.get("action") == "alloc" for e in entries)]
    if device is None:
        if not with_allocs:
            raise TraceError(f"{where!r} has no allocations on any device: was "
                             f"torch.cuda.memory._record_memory_history enabled while the workload ran?")
        if len(with_allocs) > 1:
            raise SeveralDevices(where, with_allocs)
        device = with_allocs[0]
    elif device not in with_allocs:
        raise TraceError(f"{where!r} has no allocations on device {device} "
                         f"(devices with allocations: {with_allocs or 'none'})")
    return snapshot_trace(snapshot, where, device)


def snapshot_trace(snapshot: dict, where: str, device: int, recon: Reconstruction | None = None) -> Trace:
    """The requests of a snapshot's `device` as a replay runs them (see the module docstring); one taken at an
    OOM ends at the request that failed, from its reconstruction (`recon`, made here unless given: `rebuilt.py`)."""
    extra = snapshot.get("alloctune", {})
    if not isinstance(extra, dict):
        raise TraceError(f"{where!r}: 'alloctune' must hold a dict of metadata, got {type(extra).__name__}")
    try:
        meta = _checked_meta({"source": "pytorch-snapshot", **extra}, "alloctune")
    except FieldError as exc:
        raise TraceError(f"{where!r}: field {exc.path!r}: {exc}") from None
    except ValueError as exc:
        raise TraceError(f"{where!r}: {exc}") from None
    if "allocator_settings" in snapshot:
        meta.setdefault("allocator_settings", snapshot["allocator_settings"])
    columns, meta = from_entries(snapshot["device_traces"][device], meta, where, device)
    if meta["failed_request_bytes"] or recon is not None:
        columns, meta = _at_oom(snapshot, device, columns, meta, where, recon)
    if not meta["pools"] and _graph_segments(snapshot.get("segments"), device):
        meta["warnings"].append("the snapshot's segments include CUDA graph pools, but neither its entries (torch "
                                "before pool ids in trace entries) nor alloctune's recording say which allocations "
                                "were theirs: they are replayed as if in the default pools (record with `alloctune "
                                "record` for exact pools)")
    return Trace(*columns, device, meta)


def _at_oom(snapshot: dict, device: int, columns: Columns, meta: dict, where: str,
            recon: Reconstruction | None) -> tuple[Columns, dict]:
    """A snapshot that ends at an OOM as its replay runs it (`rebuilt.at_oom`, as `diagnose` replays it), on the
    device as the run had it: what other processes held when the request failed kept outside the allocator."""
    oom = ([e for e in snapshot["device_traces"][device] if e.get("action") == "oom"] or [{}])[-1]
    try:
        recon = recon or reconstruct(snapshot, device, meta["failed_request_bytes"], oom.get("stream", 0))
        reserved = sum(int(s["total_size"]) for s in snapshot.get("segments", []) if s.get("device", 0) == device)
    except (TraceError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TraceError(f"{where!r}: the snapshot's trace or segments are malformed ({exc})") from None
    columns, meta = at_oom(columns, meta, recon)
    overhead = overhead_at_oom(meta.get("device_total_bytes"), reserved, oom.get("device_free"))
    if "overhead_bytes" not in meta and overhead is not None:
        meta["overhead_bytes"] = overhead
        meta["warnings"].append(f"{format_bytes(overhead)} of the device was held outside the allocator when the "
                                "request failed (other processes, the CUDA context): the replay keeps it so")
    return columns, meta


def _graph_segments(segments: object, device: int) -> bool:
    """Whether a snapshot's segments of `device` include some of a private pool (`segment_pool_id` not (0, 0))."""
    return isinstance(segments, list) and any(
        isinstance(s, dict) and s.get("device", 0) == device and s.get("segment_pool_id") not in (None, (0, 0), [0, 0])
        for s in segments)


def _check_order_dependence(trace: Trace) -> None:
    """Warn (in meta) when runs measured under other settings asked for a different allocation sequence."""
    digests = {m.get("alloc_digest") for m in trace.meta.get("measured", []) if m.get("alloc_digest")}
    if digests and digests != {alloc_digest(trace)}:
        warning = ORDER_DEPENDENT + ": runs measured under other settings made different allocations"
        if warning not in trace.warnings:
            trace.meta["warnings"] = [*trace.warnings, warning]


# ---- the compact format ----

def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Write `trace` in the compact format. Frees must name an allocation that is live at that point."""
    kinds = np.asarray(trace.kinds, dtype=np.uint8)
    if len({len(trace.kinds), len(trace.addrs), len(trace.sizes), len(trace.streams)}) != 1:
        raise TraceError("trace lists kinds, addrs, sizes and streams must have the same length")
    if kinds.size and kinds.max() > LAST_KIND:
        raise TraceError(f"trace kinds must be {ALLOC} (alloc), {FREE} (free), {EMPTY_CACHE} (empty_cache), "
                         f"{POOL_BEGIN}-{POOL_STREAM} (CUDA graph pool events) or {FREE_REQUESTED} (free requested)")
    live: dict[int, int] = {}  # addr -> allocation number, so any unique-while-live addresses work
    alloc_sizes: list[int] = []
    alloc_streams: list[int] = []
    back: list[int] = []
    requests: list[int] = []       # each FREE_REQUESTED's allocation, counted back as `back`
    pools: list[int] = []          # each pool event's pool number
    pool_streams: list[int] = []   # each POOL_STREAM's stream index
    for i, (kind, addr) in enumerate(zip(trace.kinds, trace.addrs)):
        if kind == ALLOC:
            if addr in live:
                raise TraceError(f"trace event {i} allocates {addr}, which is still live")
            live[addr] = len(alloc_sizes)
            alloc_sizes.append(trace.sizes[i])
            alloc_streams.append(trace.streams[i])
        elif kind == FREE:
            ident = live.pop(addr, None)
            if ident is None:
                raise TraceError(f"trace event {i} frees {addr}, which is not live")
            back.append(len(alloc_sizes) - 1 - ident)
        elif kind == FREE_REQUESTED:
            if addr not in live:
                raise TraceError(f"trace event {i} requests the free of {addr}, which is not live")
            requests.append(len(alloc_sizes) - 1 - live[addr])
        elif kind >= POOL_BEGIN:
            pools.append(addr)
            if kind == POOL_STREAM:
                pool_streams.append(trace.streams[i])
    columns = {"sizes": alloc_sizes, "streams": alloc_streams, "frees": back, "pools": pools,
               "pool_streams": pool_streams, "requests": requests}
    write_compact(path, trace.device, trace.meta,
                  {"kinds": kinds, **{name: np.asarray(values, dtype="<i8") for name, values in columns.items()}})


def _load_compact(head: bytes, compressed, where: str) -> Trace:
    header, arrays = read_compact(head, compressed, where)
    try:
        if not isinstance(header["meta"], dict) or not is_int(header["device"], 0, INT64):
            raise ValueError("'meta' must be an object and 'device' an integer")
        return _decode(arrays, header["device"], _checked_meta(header["meta"], "meta"))
    except FieldError as exc:
        raise TraceError(f"{where!r} is corrupt: field {exc.path!r}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"{where!r} is corrupt: {exc}") from None


@dataclass(frozen=True)
class MeasuredRun:
    """An entry of `meta["measured"]` as replay, search and record read it: the setting a GPU run had and what it
    measured. Checked on load through the typed reader (the entry itself stays the dict it was)."""

    conf: Conf = ""
    state: str | None = None
    effective_conf: str | None = None
    peak_reserved_bytes: Bytes | None = None
    peak_allocated_bytes: Bytes | None = None
    num_alloc_retries: Count | None = None
    num_ooms: Count | None = None
    throughput: Rate | None = None
    unit: str | None = None
    measured_seconds: Seconds | None = None
    budget_bytes: Budget | None = None
    alloc_digest: str | None = None
    env: dict[str, Any] = field(default_factory=dict)


_META_TYPES: dict[str, tuple[type, ...]] = {
    "torch_version": (str,), "device_total_bytes": (int,), "overhead_bytes": (int,), "measured": (list,),
    "warnings": (list,), "env": (dict,), "workload_hash": (str,), "step_ends": (list,), "step_ends_us": (list,),
    "warmup_steps": (int,), "pool_events": (list,)}


def _checked_meta(meta: dict, path: str) -> dict:
    """The meta keys replay reads, checked, after what it lists is counted (`path`: where the file keeps it): a
    wrong type is corrupt data, not a crash later."""
    if isinstance(runs := meta.get("measured"), list) and len(runs) > MAX_MEASURED:
        raise ValueError(f"meta 'measured' lists {len(runs):,} runs, more than the {MAX_MEASURED:,} a trace "
                         f"may hold (one per setting measured)")
    check_plain(meta, path)
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if value is None:
            continue
        if not isinstance(value, types) or isinstance(value, bool) or (isinstance(value, int) and value < 0):
            raise ValueError(f"meta {key!r} must be {' or '.join(t.__name__ for t in types)}"
                             f"{' >= 0' if types == (int,) else ''}, got {shown(value)}")
    for i, run in enumerate(meta.get("measured") or []):
        from_json(MeasuredRun, run, f"meta 'measured[{i}]'", ValueError)
    provenance(meta, "meta 'dry_run'")   # a dry run's own account of itself (results/provenance.py)
    allowed_at_oom(meta)   # the limit a replay of a snapshot taken at an OOM runs under
    if not all(isinstance(w, str) for w in meta.get("warnings") or []):
        raise ValueError("meta 'warnings' must be a list of strings")
    if "warnings" in meta:
        meta["warnings"] = distinct_warnings(meta["warnings"])
    for key in ("step_ends", "step_ends_us"):
        marks = meta.get(key) or []
        if not all(is_int(m, 0, INT64 - 1) for m in marks) or marks != sorted(marks):
            raise ValueError(f"meta {key!r} must be integers >= 0 in order, got {shown(marks)}")
    return meta


def distinct_warnings(warnings: list[str]) -> list[str]:
    """Each distinct warning once, in the order they first came, with how often where more than once; the first
    MAX_WARNINGS of them, and a line for the rest."""
    counts = Counter(warnings)
    said = [w if counts[w] == 1 else f"{w} ({counts[w]:,} times)" for w in counts]
    rest = len(said) - MAX_WARNINGS
    return said[:MAX_WARNINGS] + ([f"and {rest:,} other warnings in the trace's metadata"] if rest > 0 else [])


def _decode(arrays: dict[str, np.ndarray], device: int, meta: dict) -> Trace:
    kinds, sizes, streams, back = arrays["kinds"], arrays["sizes"], arrays["streams"], arrays["frees"]
    is_alloc, is_free, is_request = kinds == ALLOC, kinds == FREE, kinds == FREE_REQUESTED
    is_pool, is_pool_stream = (kinds >= POOL_BEGIN) & (kinds <= POOL_STREAM), kinds == POOL_STREAM
    if kinds.size and kinds.max() > LAST_KIND:
        raise ValueError("event kinds other than alloc, free, empty_cache, pool events and free requests")
    if int(is_alloc.sum()) != sizes.size or sizes.size != streams.size or int(is_free.sum()) != back.size or \
            int(is_pool.sum()) != arrays["pools"].size or int(is_pool_stream.sum()) != arrays["pool_streams"].size \
            or int(is_request.sum()) != arrays["requests"].size:
        raise ValueError("array lengths do not agree with the event kinds")
    if sizes.size and sizes.min() < 0:   # what the simulator's cores refuse: said here, with the file's name
        raise ValueError(f"an allocation of a negative size ({int(sizes.min())} bytes)")
    if not sizes.size:
        raise ValueError("no allocations")
    allocs_before = np.cumsum(is_alloc)  # at event i: allocations made up to and including i
    ids = np.full(kinds.size, -1, dtype=np.int64)   # an empty_cache names no allocation
    ids[is_alloc] = np.arange(sizes.size)
    freed = allocs_before[is_free] - 1 - back
    if freed.size and (freed.min() < 0 or back.min() < 0 or np.unique(freed).size != freed.size):
        raise ValueError("a free names an allocation that does not exist or was already freed")
    ids[is_free] = freed
    requested = allocs_before[is_request] - 1 - arrays["requests"]
    if requested.size and (requested.min() < 0 or arrays["requests"].min() < 0):
        raise ValueError("a free request names an allocation that does not exist")
    ids[is_request] = requested
    named = ids >= 0
    size_of, stream_of = np.where(named, sizes[ids], 0), np.where(named, streams[ids], 0)
    ids[is_pool] = arrays["pools"]   # a pool event names its pool, and a POOL_STREAM a stream index too
    stream_of[is_pool_stream] = arrays["pool_streams"]
    return Trace(kinds.tolist(), ids.tolist(), size_of.tolist(), stream_of.tolist(), device, meta)
