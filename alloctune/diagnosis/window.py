"""Replay the run that ended in an OOM under other settings: would it have fit, and at what peak?

The snapshot's trace is the allocator's ring buffer (`max_entries`): it may hold only the last N events, so the
run's start is missing. The state at the trace's start is rebuilt by undoing the trace, backwards, on the
segments the snapshot holds at its end: a segment allocated in the window did not exist yet, one freed in it
did; a block allocated in the window was not there, one freed in it (whoever allocated it) was. That gives each
segment at the start and the live blocks in it, at their addresses.

The replay then starts from that state, laid out the way the allocator held it: each segment requested whole,
given back to the cache, and carved into its blocks in address order (free gaps are carved as filler blocks
and freed once every segment is laid out), then the window's events, then the request that failed. Under the
setting the run used, this should reproduce the OOM; whether it does is the check of the reconstruction.
Under other settings the same requests arrive, but the state the run would have reached before the window
under them is not known: the answer for them is only as sure as the window is long.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings.conf import AllocConf
from ..sim.replay import ReplayOutcome, replay
from ..sim.trace import ALLOC, FREE, Trace
from ..units import MiB, format_bytes
from .snapshot import SMALL_SIZE, is_read


@dataclass(frozen=True)
class Reconstruction:
    trace: Trace                 # start state + window + the failed request (last event)
    window_events: int           # alloc/free events the snapshot's trace holds
    whole_run: bool              # nothing was live before the trace started
    start_segments: int
    start_live_blocks: int
    start_live_bytes: int
    start_reserved: int


@dataclass(frozen=True)
class WindowReplay:
    reconstruction: Reconstruction
    recorded_conf: str
    reproduced: bool | None      # the recorded setting's replay fails at the failed request (None: not simulated)
    outcomes: list[ReplayOutcome]
    confidence: str              # 'high', 'medium' or 'low'
    confidence_reason: str

    @property
    def fitting(self) -> list[ReplayOutcome]:
        """Settings that would have avoided the OOM, lowest peak reserved first."""
        return sorted((o for o in self.outcomes if o.fits), key=lambda o: o.sort_key())

    def to_json(self) -> dict:
        r = self.reconstruction
        return {"recorded_conf": self.recorded_conf, "reproduced": self.reproduced, "confidence": self.confidence,
                "confidence_reason": self.confidence_reason, "window_events": r.window_events,
                "whole_run": r.whole_run, "start_segments": r.start_segments,
                "start_live_blocks": r.start_live_blocks, "start_live_bytes": r.start_live_bytes,
                "start_reserved_bytes": r.start_reserved, "outcomes": [o.to_json() for o in self.outcomes]}


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


class _Events:
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
    # the entries check_snapshot checked: the others are never read, not even their address
    entries = [e for e in snapshot["device_traces"][device] if isinstance(e, dict) and is_read(e)]
    start = _undo_window(entries, [s for s in snapshot.get("segments", []) if s.get("device", 0) == device])
    blocks = start.blocks
    events = _Events()
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
    meta: dict = {"streams": [[k[0], *k[1]] for k in events.stream_keys], "warnings": []}
    version = (snapshot.get("alloctune") or {}).get("torch_version")
    if version:
        meta["torch_version"] = version
    trace = Trace(events.kinds, events.ids, events.sizes, events.streams, device, meta)
    return Reconstruction(trace, start.window, start_live == 0, len(start.segments), start_live,
                          sum(blocks.values()), sum(start.segments.values()))


def replay_window(recon: Reconstruction, recorded_conf: AllocConf, candidates: list[AllocConf], device_memory: int,
                  overhead: int, budget: int | None, torch_version: str | None,
                  jobs: int | None = None) -> WindowReplay:
    confs = [recorded_conf, *(c for c in candidates if c.label != recorded_conf.label)]
    outcomes = replay(recon.trace, confs, device_memory, budget_bytes=budget, overhead_bytes=overhead, jobs=jobs,
                      torch_version=torch_version)
    recorded, others = outcomes[0], outcomes[1:]
    last = len(recon.trace) - 1
    reproduced = None if recorded.result is None else recorded.result.first_oom_index == last
    fb = format_bytes
    if reproduced is False:
        how = ("fits" if recorded.fits else f"fails earlier, at event {recorded.result.first_oom_index} of "
               f"{last + 1}") if recorded.result else ""
        confidence, reason = "low", (f"replaying the recorded setting ({recorded.conf}) from the rebuilt state "
                                     f"{how} instead of failing at the request: the rebuilt start state or the "
                                     "simulation differs from the run, so the answers below are not reliable")
    elif recon.whole_run:
        confidence, reason = "high", ("the trace covers the whole run and its replay under the recorded setting "
                                      "fails at the same request")
    else:
        confidence, reason = "medium", (
            f"the trace holds the last {recon.window_events} events only; the start state was rebuilt from the "
            f"segments ({recon.start_segments} segment(s), {fb(recon.start_reserved)} reserved, "
            f"{recon.start_live_blocks} live block(s), {fb(recon.start_live_bytes)}) and reproduces the OOM under "
            "the recorded setting; under another setting the run would have reached a different state before "
            "the window, which no trace of this run shows")
    return WindowReplay(recon, recorded.conf, reproduced, [recorded, *others], confidence, reason)


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
