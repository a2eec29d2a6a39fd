"""The CUDA graph captures of a recording (`meta["pool_events"]`, which the start-up hook notes:
`runtime/graphs.py`), placed among a snapshot's entries by time, and the pool each allocation went to.

An event is {"time_us", "action", "pool", "stream", "device", "empty_cache"}: `action` "begin" (a capture into pool
`pool`, a pair as torch names pools, begins on stream `stream`, the cudaStream_t as trace entries give it; None: every
stream of the thread, as cudagraph trees' warm-up allocates), "end" (it ends) or "release" (a graph that used the
pool was reset or destroyed); `empty_cache`: `torch.cuda.graph` emptied the cache right before the capture began.
Times are the Unix time in µs, the clock of the entries' `time_us`, each taken when its call returned: an event goes
after the entries of its microsecond.

Which pool an allocation went to: the entry's `pool_id` where torch writes one (newer torch); else the innermost
capture underway on its stream (the allocator's `get_pool` searches the captures underway last first).
"""
from __future__ import annotations

from ..errors import TraceError, shown
from .limits import is_int

ACTIONS = ("begin", "end", "release")
DEFAULT_POOL = (0, 0)
# Captures underway at once: a stream captures one graph at a time, and a recording nests few (cudagraph trees'
# warm-up inside another). An entry is routed, and an end closes its captures, by a search of those underway; 30,000
# begun and never ended (1.3 MB of snapshot) made that quadratic, a load of hours: more are refused.
MAX_OPEN_CAPTURES = 256


def _checked(event: object, where: str) -> dict:
    if not isinstance(event, dict) or event.get("action") not in ACTIONS or not is_int(event.get("time_us")) \
            or not (isinstance(event.get("pool"), list) and len(event["pool"]) == 2
                    and all(is_int(p) for p in event["pool"])) \
            or not (event.get("stream") is None or is_int(event["stream"])):
        raise TraceError(f"{where!r}: meta 'pool_events' holds {shown(event, 200)}, not an event "
                         f"{{time_us, action ({'/'.join(ACTIONS)}), pool [a, b], stream}}")
    return event


class Captures:
    """One device's pool events in time order, handed out as the entries reach them."""

    def __init__(self, events: list, device: int, where: str):
        mine = [_checked(e, where) for e in events]
        self._pending = sorted((e for e in mine if e.get("device", 0) == device), key=lambda e: e["time_us"])
        self._next = 0                # the first event not yet handed out: `due` runs once per entry, so no copies
        self._open: list[dict] = []   # the begins not yet ended, in order
        self._where = where

    def due(self, time_us: int | None) -> list[dict]:
        """The events that come before an entry at `time_us` (None: after the last entry), taken off the queue."""
        start = n = self._next
        while n < len(self._pending):
            event = self._pending[n]
            if time_us is not None and event["time_us"] >= time_us:
                break
            n += 1
        if n == start:
            return []
        due, self._next = self._pending[start:n], n
        for event in due:
            if event["action"] == "begin":
                self._open.append(event)
                if len(self._open) > MAX_OPEN_CAPTURES:
                    raise TraceError(f"{self._where!r}: meta 'pool_events' has more than {MAX_OPEN_CAPTURES} CUDA graph "
                                     f"captures underway at once, which no recording holds")
            elif event["action"] == "end":
                self._open = [e for e in self._open if e["pool"] != event["pool"]]
        return due

    def route(self, entry: dict) -> tuple:
        """The pool an alloc entry went to: its own `pool_id`, else the last capture underway on its stream."""
        pool = entry.get("pool_id")
        if pool is not None:
            return tuple(pool) if isinstance(pool, (list, tuple)) else (pool,)
        stream = entry.get("stream", 0)
        for event in reversed(self._open):
            if event["stream"] is None or event["stream"] == stream:
                return tuple(event["pool"])
        return DEFAULT_POOL
