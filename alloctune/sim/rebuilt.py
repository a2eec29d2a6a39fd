"""A snapshot taken at an OOM, as the requests a replay runs: the state at its trace's start rebuilt, the trace's
window, then the request that failed. `diagnose` and every command that replays a snapshot (`trace.load_trace`)
replay the same requests (`at_oom`), so that they give the same answer for the same snapshot.

The snapshot's trace is the allocator's ring buffer (`max_entries`): it may hold only the last N events, so the
run's start is missing. The state at the trace's start is rebuilt by undoing the trace, backwards, on the
segments the snapshot holds at its end: a segment allocated in the window did not exist yet, one freed in it
did; a block allocated in the window was not there, one freed in it (whoever allocated it) was. That gives each
segment at the start and the live blocks in it, at their addresses.

Where the trace starts with nothing reserved (it covers the whole run), the replay is the trace as `entries.py`
reads it (its releases, CUDA graph pools and steps kept), the failed request last. Otherwise it starts from the
rebuilt state, laid out the way the allocator held it: each segment requested whole, given back to the cache, and
carved into its blocks in address order (free gaps are carved as filler blocks and freed once every segment is
laid out), then the window's allocations and frees, then the request that failed. Under the setting the run used,
this should reproduce the OOM; under other settings the same requests arrive, but the state the run would have
reached before the window under them is not known: the answer for them is only as sure as the window is long.

The run's device: what the OOM left free, with what the allocator held, tells what other processes and the CUDA
context held outside it (`overhead_at_oom`), which a replay keeps outside the allocator as the run did.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TraceError
from ..results.records import Bytes
from ..results.typed import problem
from ..units import MiB, format_bytes
from .blocks import SMALL_SIZE
from .entries import ALLOC, FREE, Columns

_READ_ACTIONS = frozenset(("alloc", "free_completed", "segment_alloc", "segment_free", "oom"))


def is_read(entry: dict) -> bool:
    """Whether the trace entry `entry` is one the rebuild reads (and diagnose's `check_snapshot` checks)."""
    action = entry.get("action")
    return isinstance(action, str) and action in _READ_ACTIONS   # an action may be a list: unhashable


@dataclass(frozen=True)
class Reconstruction:
    columns: Columns             # start state + window + the failed request (last event)
    streams: list[list[int]]     # each stream index's [stream, *pool id]
    window_events: int           # alloc/free events the snapshot's trace holds
    whole_run: bool              # nothing was live before the trace started
    start_segments: int
    start_live_blocks: int
    start_live_bytes: int
    start_reserved: int
    requested: int               # the failed request's size


@dataclass
class _Start:
    """The state when the trace starts: segments (address -> size) and live blocks (address -> size)."""

    segments: dict[int, int]
    segment_key: dict[int, tuple]      # (stream, pool id)
    expandable: set[int]
    blocks: dict[int, int]
    block_key: dict[int, tuple]
    window: int                        # alloc and free events in the trace


def _undo_window(entries: list[dict], segments: list[dict]) -> _Start:
    """Walk the trace backwards from the segments at its end (see the module docstring)."""
    seg_sizes = {int(s["address"]): int(s["total_size"]) for s in segments}
    seg_key = {int(s["address"]): (s.get("stream", 0), _pool(s.get("segment_pool_id"))) for s in segments}
    blocks = {address: _requested(b) for s in segments for address, b in _placed(s) if b.get("state") != "inactive"}
    block_key = {address: seg_key[int(s["address"])] for s in segments for address, _ in _placed(s)}
    window = 0
    for e in reversed(entries):
        action, addr = e.get("action"), int(e.get("addr") or 0)
        if action == "alloc":
            blocks.pop(addr, None)
            window += 1
        elif action == "free_completed":
            blocks[addr] = int(e["size"])
            block_key[addr] = _key(e)
            window += 1
        elif action == "segment_alloc":
            seg_sizes.pop(addr, None)
        elif action == "segment_free":
            seg_sizes[addr] = int(e["size"])
            seg_key[addr] = _key(e)
    expandable = {int(s["address"]) for s in segments if s.get("is_expandable")}
    return _Start(seg_sizes, seg_key, expandable, blocks, block_key, window)


class _Columns:
    """The replay's events as the parallel lists a `Trace` holds, with ids handed out in order."""

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.ids: list[int] = []
        self.sizes: list[int] = []
        self.streams: list[int] = []
        self.stream_keys: dict[tuple, int] = {}
        self.size_of: dict[int, int] = {}

    def alloc(self, size: int, key: tuple) -> int:
        ident = len(self.size_of)
        self.size_of[ident] = size
        self._add(ALLOC, ident, size, key)
        return ident

    def free(self, ident: int, key: tuple) -> None:
        self._add(FREE, ident, self.size_of[ident], key)

    def _add(self, kind: int, ident: int, size: int, key: tuple) -> None:
        self.kinds.append(kind)
        self.ids.append(ident)
        self.sizes.append(size)
        self.streams.append(self.stream_keys.setdefault(key, len(self.stream_keys)))


def reconstruct(snapshot: dict, device: int, requested: int, oom_stream: int) -> Reconstruction:
    """The run's requests as far as the snapshot shows them, from the state at its trace's start (see the module
    docstring); a malformed trace or segment is a TraceError."""
    try:
        return _reconstructed(snapshot, device, requested, oom_stream)
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"the snapshot's trace or segments are malformed ({exc})") from None


def _reconstructed(snapshot: dict, device: int, requested: int, oom_stream: int) -> Reconstruction:
    # the entries check_snapshot checked: the others are never read, not even their address
    entries = [e for e in snapshot["device_traces"][device] if isinstance(e, dict) and is_read(e)]
    start = _undo_window(entries, [s for s in snapshot.get("segments", []) if s.get("device", 0) == device])
    blocks = start.blocks
    events = _Columns()
    live: dict[int, int] = {}   # address -> id of the block the replay holds there
    fillers: list[tuple[int, tuple]] = []
    placed: set[int] = set()
    for base in sorted(start.segments):
        end, key = base + start.segments[base], start.segment_key.get(base, (0, (0, 0)))
        inside = sorted(a for a in blocks if base <= a < end)
        placed.update(inside)
        if base in start.expandable or end - base <= 2 * MiB and all(blocks[a] <= SMALL_SIZE for a in inside):
            # small-pool and expandable segments cannot be laid out by carving: their blocks are allocated as
            # they come (the small pool packs them; an expandable segment maps what they need)
            for a in inside:
                live[a] = events.alloc(blocks[a], key)
            continue
        events.free(events.alloc(end - base, key), key)
        cursor = base
        for a in inside + [end]:
            if a - cursor > SMALL_SIZE:  # a gap up to 1 MiB stays with the block before it, as the allocator would
                fillers.append((events.alloc(a - cursor, key), key))
            if a == end:
                break
            live[a] = events.alloc(blocks[a], key)
            cursor = a + _round(blocks[a])
    for a in sorted(set(blocks) - placed):  # live blocks in no known segment: allocated as they come
        live[a] = events.alloc(blocks[a], start.block_key.get(a, (0, (0, 0))))
    for ident, key in fillers:
        events.free(ident, key)
    start_live = len(live)
    for e in entries:  # the window itself
        action, addr = e.get("action"), int(e.get("addr") or 0)
        if action == "alloc":
            live[addr] = events.alloc(int(e["size"]), _key(e))
        elif action == "free_completed" and addr in live:
            events.free(live.pop(addr), _key(e))
    events.alloc(requested, (oom_stream, (0, 0)))
    columns = (events.kinds, events.ids, events.sizes, events.streams)
    return Reconstruction(columns, [[k[0], *k[1]] for k in events.stream_keys], start.window, start_live == 0, len(start.segments), start_live,
                          sum(blocks.values()), sum(start.segments.values()), requested)


def at_oom(columns: Columns, meta: dict, recon: Reconstruction) -> tuple[Columns, dict]:
    """The requests a replay of a snapshot taken at an OOM runs, and their meta: the trace as `entries.py` read it
    (`columns`, `meta`) where it starts with nothing reserved and ends at the failed request, else the rebuilt
    start, the window and the failed request (`recon`)."""
    fb = format_bytes
    failed = (f"the snapshot was taken at an OOM: the request that failed ({fb(recon.requested)}) is replayed last, "
              "as `alloctune diagnose` replays it")
    if recon.start_segments == 0 and meta.get("failed_request_bytes"):
        return columns, {**meta, "warnings": [*meta.get("warnings", []), failed]}
    rebuilt = (f"the snapshot's trace starts mid-run (its last {recon.window_events} events): the state at its start "
               f"was rebuilt from the segments ({recon.start_segments} segment(s), {fb(recon.start_reserved)} "
               f"reserved, {recon.start_live_blocks} live block(s), {fb(recon.start_live_bytes)}) and replayed "
               "before it")
    kept = {k: v for k, v in meta.items() if k not in ("step_ends", "dropped_frees", "dropped_free_bytes")}
    warnings = [w for w in meta.get("warnings", []) if "allocated before the recording started" not in w]
    return recon.columns, {**kept, "streams": recon.streams, "pools": [], "failed_request_bytes": recon.requested,
                           "warnings": [*warnings, rebuilt, failed]}


def allowed_at_oom(extra: dict) -> int | None:
    """What the process could have when the request failed, as its snapshot says: the limit of a memory fraction
    that alloctune.dump_on_oom's observer kept (`oom.allowed_bytes` of the snapshot's `alloctune` dict, which a
    trace loaded from it keeps as its meta); None where no fraction was in force or the snapshot does not say.
    `diagnose` judges the OOM against it and `replay` replays under it, so both give one answer. A figure that is
    no size is a ValueError."""
    oom = extra.get("oom")
    allowed = oom.get("allowed_bytes") if isinstance(oom, dict) else None
    if allowed is not None and (why := problem(Bytes, allowed)):
        raise ValueError(f"field 'oom.allowed_bytes': {why}")
    return allowed


def overhead_at_oom(device_total: int | None, reserved: int, device_free: object) -> int | None:
    """What the device held outside the allocator when the request failed (other processes, the CUDA context):
    its memory less what the allocator reserved and what was free; None where the snapshot does not say."""
    if not device_total or not isinstance(device_free, int) or isinstance(device_free, bool):
        return None
    return max(device_total - reserved - device_free, 0)



def _placed(segment: dict) -> list[tuple[int, dict]]:
    """A segment's blocks with their addresses. Snapshots of torch 2.0 and older give blocks no `address`: they
    lie one after another from the segment's start, in the order listed."""
    out, address = [], int(segment["address"])
    for b in segment.get("blocks", []):
        address = int(b.get("address", address))
        out.append((address, b))
        address += int(b["size"])
    return out


def _requested(block: dict) -> int:
    """What the program asked for: `requested_size`, or in torch 2.0 and older snapshots the `real_size` of the
    block's latest `history` entry, else the block's size."""
    history = block.get("history")
    legacy = history[-1].get("real_size") if isinstance(history, list) and history else None
    return int(block.get("requested_size") or legacy or block["size"])


def _key(entry: dict) -> tuple:
    return (entry.get("stream", 0), _pool(entry.get("pool_id")))


def _pool(pool_id) -> tuple:
    return tuple(pool_id) if isinstance(pool_id, (list, tuple)) and pool_id else (0, 0)


def _round(size: int) -> int:
    """The allocator's rounding of a large request without divisions: a multiple of 512 bytes."""
    return -(-size // 512) * 512
