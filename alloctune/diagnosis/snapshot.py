"""What a memory snapshot says about an OOM: the figures at the failure and the fragmentation picture.

A snapshot (`torch.cuda.memory._snapshot()`, read by `sim.pickles.unpickle_snapshot`) holds `segments`, the
allocator's state when it was taken: each with `total_size`, `allocated_size`, `segment_type` ('large' or
'small'), `stream`, `segment_pool_id`, `is_expandable` and `blocks` (`address`, `size`, `requested_size`,
`state`: 'active_allocated', 'active_awaiting_free' (2.0: 'active_pending_free') or 'inactive' = free).
torch 2.0 and older wrote no `segment_pool_id`, `is_expandable` or block `address` (blocks are listed in address
order) and kept the requested size in a block's `history`. Taken by `alloctune.dump_on_oom`'s observer, it shows
the state after the allocator released what it could, just before it raised; the trace's last `oom` entry holds
the request (`size`) and the device's free bytes (`device_free`), and the `alloctune` dict the limit the
observer was given.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import OptionText, TraceError
from ..results.records import Bytes, Count
from ..results.typed import FieldError, check_plain, from_json
from ..settings.conf import AllocConf
from ..settings.readback import conf_from_settings
from ..settings.versions import known_keys
from ..sim.rebuilt import allowed_at_oom, is_read
from ..units import MiB, format_bytes, plural
from .facts import OomFacts

SMALL_SIZE = MiB  # requests up to 1 MiB (after rounding to 512 B) come from the small pool
T = TypeVar("T")


# ---- what diagnose reads of a snapshot, checked through the typed reader before anything uses it ----
# Only the fields read below are checked (the records ignore the rest); each record is checked and the snapshot
# stays the dict it was, so a damaged or crafted snapshot is one line naming the field, never a crash later.

@dataclass(frozen=True)
class _History:   # torch 2.0 and older kept a block's request here
    addr: Bytes | None = None
    real_size: Bytes | None = None


@dataclass(frozen=True)
class _Block:
    size: Bytes
    state: str = "inactive"
    address: Bytes | None = None
    requested_size: Bytes | None = None
    history: list[_History] = field(default_factory=list)


@dataclass(frozen=True)
class _Segment:
    address: Bytes
    total_size: Bytes
    allocated_size: Bytes = 0
    device: Count = 0
    stream: Bytes = 0
    segment_type: str = "large"
    segment_pool_id: tuple[int, ...] | None = None
    is_expandable: bool = False
    blocks: list[_Block] = field(default_factory=list)


@dataclass(frozen=True)
class _Entry:
    action: str
    addr: Bytes | None = None
    size: Bytes = 0
    stream: Bytes = 0
    pool_id: tuple[int, ...] | None = None
    device_free: Bytes | None = None


@dataclass(frozen=True)
class _Settings:
    expandable_segments: bool | None = None
    garbage_collection_threshold: float | None = None
    max_split_size: int | None = None


@dataclass(frozen=True)
class _Observed:
    """What alloctune.dump_on_oom's observer kept of the OOM (`alloctune.oom`)."""

    device: Count | None = None
    requested_bytes: Bytes | None = None
    device_free_bytes: Bytes | None = None
    allowed_bytes: Bytes | None = None
    memory_stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Extra:
    """The `alloctune` dict dump_on_oom adds."""

    torch_version: str | None = None
    device_total_bytes: Bytes | None = None
    max_entries: Count | None = None
    oom: _Observed | None = None


# The trace entries replayed: a snapshot's other actions are not requests and are skipped unread.
def check_snapshot(snapshot: dict, where: str) -> None:
    """Refuse, in one `TraceError` naming the field, a snapshot whose parts diagnose reads are not what torch (or
    dump_on_oom) writes: a segment `device` that is a list, an infinite address, a string size, 2**80 bytes, a
    segment holding more than its size..."""
    def check(record: type[T], value: object, path: str) -> T:
        try:
            return from_json(record, value, path, TraceError)
        except TraceError as exc:
            raise TraceError(f"{where!r}: {exc}") from None

    segments = snapshot.get("segments", [])
    if not isinstance(segments, list):
        raise TraceError(f"{where!r}: 'segments' is not a list of segments (dicts)")
    for i, segment in enumerate(segments):
        seg = check(_Segment, segment, f"segments[{i}]")
        held = max(seg.allocated_size, sum(b.size for b in seg.blocks))
        if held > seg.total_size:   # its blocks lie within it, and the live ones among them
            raise TraceError(f"{where!r}: segments[{i}] holds {held:,} bytes (its blocks, or allocated_size) in "
                             f"{seg.total_size:,}: no allocator's state has that")
    for d, entries in enumerate(snapshot["device_traces"]):
        if not isinstance(entries, list):
            raise TraceError(f"{where!r}: device_traces[{d}] is not a list of trace entries (dicts)")
        for n, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise TraceError(f"{where!r}: device_traces[{d}][{n}] is not a trace entry (a dict)")
            if is_read(entry):
                check(_Entry, entry, f"device_traces[{d}][{n}]")
    if "allocator_settings" in snapshot:
        check(_Settings, snapshot["allocator_settings"], "allocator_settings")
    if "alloctune" in snapshot:
        check(_Extra, snapshot["alloctune"], "alloctune")
        try:
            check_plain(snapshot["alloctune"], "alloctune")
            check(_Settings, (snapshot["alloctune"].get("oom") or {}).get("memory_stats") or {},
                  "alloctune.oom.memory_stats")
        except FieldError as exc:
            raise TraceError(f"{where!r}: field {exc.path!r}: {exc}") from None


@dataclass(frozen=True)
class PoolView:
    """One pool's segments: how much is reserved, live and free, and the largest free block."""

    pool: str
    segments: int
    reserved: int
    allocated: int
    free: int
    largest_free: int
    free_blocks: int
    expandable: bool
    private: bool = False   # a CUDA graph's (or MemPool's) private pool

    def to_json(self) -> dict:
        return {"pool": self.pool, "segments": self.segments, "reserved_bytes": self.reserved,
                "allocated_bytes": self.allocated, "free_bytes": self.free, "largest_free_bytes": self.largest_free,
                "free_blocks": self.free_blocks, "expandable": self.expandable, "private": self.private}


@dataclass(frozen=True)
class SegmentView:
    address: int
    pool: str
    total: int
    allocated: int
    free: int
    largest_free: int
    free_blocks: int
    live_blocks: int

    def to_json(self) -> dict:
        return {"address": hex(self.address), "pool": self.pool, "total_bytes": self.total,
                "allocated_bytes": self.allocated, "free_bytes": self.free, "largest_free_bytes": self.largest_free,
                "free_blocks": self.free_blocks, "live_blocks": self.live_blocks}


@dataclass(frozen=True)
class SnapshotView:
    device: int
    reserved: int
    allocated: int
    pools: list[PoolView]
    wasteful: list[SegmentView]      # the segments with the most free bytes, most first
    oom: dict | None                 # {requested, device_free, stream, pool}: the last OOM in the trace
    extra: dict                      # the `alloctune` dict dump_on_oom adds
    settings: dict | None            # allocator_settings, when this torch writes them
    has_trace: bool

    def to_json(self) -> dict:
        return {"device": self.device, "reserved_bytes": self.reserved, "allocated_bytes": self.allocated,
                "pools": [p.to_json() for p in self.pools], "most_wasteful_segments": [s.to_json() for s in
                                                                                       self.wasteful],
                "oom": self.oom, "has_trace": self.has_trace}

    def recorded_conf(self) -> AllocConf:
        """The setting the run used, as its allocator reported it (max_split_size from the OOM's stats first)."""
        stats = (self.extra.get("oom") or {}).get("memory_stats") or {}
        max_split = stats.get("max_split_size", (self.settings or {}).get("max_split_size", -1))
        return conf_from_settings(self.settings, int(max_split))

    def facts(self) -> OomFacts | None:
        """The figures at the OOM, when the snapshot says what was requested; None otherwise."""
        oom = self.oom
        if oom is None:
            return None
        pool = self.pool_of(oom["requested"], oom.get("stream", 0))
        version = self.extra.get("torch_version")
        return OomFacts(expandable_segments=version is None or "expandable_segments" in known_keys(version),
                        requested=oom["requested"], allocated=self.allocated, reserved=self.reserved,
                        device_free=oom.get("device_free"), device_total=self.extra.get("device_total_bytes"),
                        allowed=oom.get("allowed"), largest_free_block=pool.largest_free if pool else 0,
                        gpu=self.device, graph_pools_free=sum(p.free for p in self.pools if p.private))

    def pool_of(self, requested: int, stream: int) -> PoolView | None:
        name = _pool_name("small" if requested <= SMALL_SIZE else "large", stream, None)
        return next((p for p in self.pools if p.pool == name), None)


def view_snapshot(snapshot: dict, where: str, device: int | None = None) -> SnapshotView:
    """Summarise `snapshot` (a plain dict from `sim.pickles.unpickle_snapshot`) for one device."""
    segments = snapshot.get("segments", [])
    if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
        raise TraceError(f"{where!r}: 'segments' is not a list of segments (dicts)")
    extra: dict = snapshot["alloctune"] if isinstance(snapshot.get("alloctune"), dict) else {}
    traces = snapshot.get("device_traces") or []
    oom_extra: dict = extra["oom"] if isinstance(extra.get("oom"), dict) else {}
    if device is None:
        device = oom_extra.get("device")
    if device is None:
        with_oom = [i for i, t in enumerate(traces) if any(e.get("action") == "oom" for e in t)]
        on = sorted({s.get("device", 0) for s in segments})
        device = with_oom[-1] if with_oom else (on[0] if len(on) == 1 else 0)
        if not with_oom and len(on) > 1:
            raise TraceError(OptionText("{where!r} has segments on devices {devices}: choose one with {device=N}",
                                        where=where, devices=on))
    mine = [s for s in segments if s.get("device", 0) == device]
    entries = traces[device] if 0 <= device < len(traces) and isinstance(traces[device], list) else []
    if not mine and not entries and oom_extra.get("device") != device:   # e.g. --device naming a host GPU number
        present = sorted({s.get("device", 0) for s in segments}
                         | {i for i, t in enumerate(traces) if isinstance(t, list) and t})
        raise TraceError(f"{where!r} holds nothing on device {device} (devices in it: {present or 'none'})")
    pools: dict[str, list[dict]] = {}
    views = []
    try:
        for s in mine:
            name = _pool_name(s.get("segment_type", "large"), s.get("stream", 0), s.get("segment_pool_id"))
            pools.setdefault(name, []).append(s)
            free = [b["size"] for b in s.get("blocks", []) if b.get("state") == "inactive"]
            views.append(SegmentView(int(s["address"]), name, int(s["total_size"]), int(s["allocated_size"]),
                                     sum(free), max(free, default=0), len(free),
                                     sum(1 for b in s.get("blocks", []) if b.get("state") != "inactive")))
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"{where!r}: a segment lacks a field or has a bad one ({exc})") from None
    pool_views = []
    for name, segs in sorted(pools.items()):
        mine_views = [v for v in views if v.pool == name]
        pool_views.append(PoolView(name, len(segs), sum(v.total for v in mine_views),
                                   sum(v.allocated for v in mine_views), sum(v.free for v in mine_views),
                                   max((v.largest_free for v in mine_views), default=0),
                                   sum(v.free_blocks for v in mine_views),
                                   any(s.get("is_expandable") for s in segs),
                                   _is_private(segs[0].get("segment_pool_id"))))
    ooms = [e for e in entries if isinstance(e, dict) and e.get("action") == "oom"]
    oom = None
    if ooms:
        last = ooms[-1]
        oom = {"requested": int(last.get("size", 0)), "device_free": last.get("device_free"),
               "stream": last.get("stream", 0)}
    elif oom_extra.get("requested_bytes") is not None:  # the ring buffer lost the entry; the observer has it
        oom = {"requested": int(oom_extra["requested_bytes"]), "device_free": oom_extra.get("device_free_bytes"),
               "stream": 0}
    if oom is not None:
        oom["allowed"] = allowed_at_oom(extra)
    settings = snapshot.get("allocator_settings") if isinstance(snapshot.get("allocator_settings"), dict) else None
    return SnapshotView(device, sum(v.total for v in views), sum(v.allocated for v in views), pool_views,
                        sorted(views, key=lambda v: -v.free)[:5], oom, extra, settings,
                        any(isinstance(e, dict) and e.get("action") == "alloc" for e in entries))


def _is_private(pool_id) -> bool:
    return bool(pool_id) and tuple(pool_id) != (0, 0)


def _pool_name(kind: str, stream: int, pool_id) -> str:
    private = _is_private(pool_id)
    return f"{kind} pool, stream {stream:#x}" + (f", private pool {tuple(pool_id)}" if private else "")


def picture_lines(view: SnapshotView) -> list[str]:
    """The fragmentation picture in a few lines: per pool, then the most wasteful segments."""
    fb = format_bytes
    lines = []
    for p in view.pools:
        lines += [f"{p.pool}{' (expandable)' if p.expandable else ''}: {plural(p.segments, 'segment')}, "
                  f"{fb(p.reserved)} reserved, {fb(p.allocated)} allocated,",
                  f"  {fb(p.free)} free in {plural(p.free_blocks, 'block')}, the largest {fb(p.largest_free)}"]
    wasteful = [s for s in view.wasteful if s.free]
    if wasteful:
        lines.append("the segments with the most free memory:")
    for s in wasteful:
        lines.append(f"  {s.address:#x} {fb(s.total)}: {fb(s.allocated)} live in {s.live_blocks}, "
                     f"{fb(s.free)} free in {s.free_blocks} (largest {fb(s.largest_free)})")
    return lines
