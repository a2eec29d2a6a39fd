"""The CUDA graph captures of a recorded job, noted as the caching allocator sees them: what the start-up hook puts in
a trace's metadata (`pool_events`), which `sim/captures.py` places among the trace's entries.

When recording, the hook patches, as the modules load (`imports.after_import`):
- `torch.cuda.graphs.CUDAGraph.capture_begin` / `capture_end` (what `torch.cuda.graph`, `make_graphed_callables` and
  inductor's cudagraph trees call): a "begin" into the graph's pool (`graph.pool()`: a new one, or the one a `pool=`
  handle shares) on the current stream, and an "end";
- `CUDAGraph.reset` and the graph's death (a weakref finalizer): a "release", once per capture, as the C++ graph
  releases its pool once (`releasePool`), whichever comes first;
- `torch.cuda.graph.__enter__`, which empties the cache before it begins the capture: that begin says so;
- `torch._C._cuda_beginAllocateCurrentThreadToPool`, `_cuda_beginAllocateToPool`, `_cuda_endAllocateToPool` and
  `_cuda_releasePool` (cudagraph trees' warm-up in the pool, `torch.cuda.use_mem_pool`; also where
  `torch.cuda.memory` imported them by name): a "begin" of every stream of the thread, an "end", a "release";
- `torch._C._cuda_setCheckpointPoolState` (cudagraph trees, before it records a graph on a new branch of its tree):
  the allocator frees every block of the pool and allocates again, at their old addresses, the blocks the checkpoint
  held, outside any capture. Those allocations went to the pool, so the call is noted as a begin of every stream
  before it (a µs early: the allocations of its own µs come after), an end and a release after it (the begin's use
  of the pool given back). The checkpoint names its pool only where `_cuda_getCheckpointState(device, pool)` made it.
Each event is {"time_us", "action", "pool", "stream", "device", "empty_cache"} (`sim/captures.py` says what each
means), its time the Unix time in µs, the clock of the trace's `time_us`, taken when the call has returned: what
torch allocates inside `capture_begin` before it switches to the pool (the RNG's seed and offset, at a process's first
capture) is in the default pool, and nothing is allocated after the switch before the call returns. Standard library
only at import; torch is the program's own, given by the patches.
"""
from __future__ import annotations

import functools
import threading
import time
import weakref

TYPE_CHECKING = False   # typing is not imported at start-up
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Callable

_events: list[dict] = []   # appended to without a lock (atomic under the GIL): a finalizer may note inside a note
_entering = threading.local()   # inside torch.cuda.graph.__enter__, which empties the cache first
_C_NAMES = ("_cuda_beginAllocateCurrentThreadToPool", "_cuda_beginAllocateToPool", "_cuda_endAllocateToPool",
            "_cuda_releasePool")
# id of a checkpoint -> (the checkpoint, held so that no other object takes its id; its pool): a checkpoint is a list
# of the pool's blocks, and cudagraph trees keeps each it takes for the life of its tree anyway
_checkpoints: dict[int, tuple[Any, tuple]] = {}


def events() -> list[dict]:
    """The events noted so far, in the order noted; a begin whose pool never became known (its capture failed, or
    `pool()` did) is left out, as a capture that allocated nothing the replay could place."""
    return [e for e in _events if e["pool"]]


def _note(action: str, pool: Any, stream: int | None, device: int, time_us: int, empty_cache: bool = False) -> dict:
    event = {"time_us": time_us, "action": action, "pool": [int(p) for p in pool], "stream": stream,
             "device": int(device), "empty_cache": empty_cache}
    _events.append(event)
    return event


def _now() -> int:
    return time.time_ns() // 1000


def watch_graphs(graphs: ModuleType) -> None:
    """torch.cuda.graphs has loaded: patch CUDAGraph and torch.cuda.graph, and the pool calls of torch._C."""
    import torch

    cls = graphs.CUDAGraph
    begin, end, reset = cls.capture_begin, cls.capture_end, cls.reset

    @functools.wraps(begin)
    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> None:
        entering = getattr(_entering, "on", False)
        begin(self, *args, **kwargs)
        _quietly(_begun, torch, self, kwargs.get("pool", args[0] if args else None), _now(), entering)

    @functools.wraps(end)
    def capture_end(self: Any) -> None:
        end(self)
        _quietly(_ended, torch, self)

    @functools.wraps(reset)
    def reset_graph(self: Any) -> None:
        reset(self)
        finalizer = getattr(self, "_alloctune_release", None)
        if finalizer is not None:
            finalizer()   # noted now, once: the finalizer does nothing after

    cls.capture_begin, cls.capture_end, cls.reset = capture_begin, capture_end, reset_graph
    enter = graphs.graph.__enter__

    @functools.wraps(enter)
    def graph_enter(self: Any) -> Any:
        _entering.on = True
        try:
            return enter(self)
        finally:
            _entering.on = False

    graphs.graph.__enter__ = graph_enter
    _patch_pool_calls(torch._C)


def watch_memory(memory: ModuleType) -> None:
    """torch.cuda.memory has loaded: its names for the pool calls (`use_mem_pool` calls them by those)."""
    import torch

    _patch_pool_calls(torch._C)
    for name in _C_NAMES:
        if hasattr(memory, name):
            setattr(memory, name, getattr(torch._C, name))


def _quietly(note: Callable[..., None], *args: Any) -> None:
    """Notes what a patched call did; never raises into the program (a torch whose graph API differs, no CUDA)."""
    try:
        note(*args)
    except Exception:
        pass   # the capture goes unnoted: the replay then warns of graph-pool memory it cannot place


def _begun(torch: Any, graph: Any, pool: Any, t: int, entering: bool) -> None:
    # `graph.pool()` answers only after a successful capture (torch 2.11 raises before): a begin without a `pool=`
    # handle gets its pool at the end of the capture
    event = _note("begin", pool or (), torch.cuda.current_stream().cuda_stream, torch.cuda.current_device(), t,
                  entering)
    graph._alloctune_begin = None if pool else event


def _ended(torch: Any, graph: Any) -> None:
    pool, device = tuple(graph.pool()), torch.cuda.current_device()
    begun = getattr(graph, "_alloctune_begin", None)
    if begun is not None:
        begun["pool"] = [int(p) for p in pool]
    _note("end", pool, torch.cuda.current_stream().cuda_stream, device, _now())
    finalizer = weakref.finalize(graph, _released, pool, device)
    finalizer.atexit = False   # a graph alive at exit releases nothing the trace still shows
    graph._alloctune_release = finalizer


def _released(pool: tuple, device: int) -> None:
    _note("release", pool, None, device, _now())


def _patch_pool_calls(c: Any) -> None:
    """torch._C's pool calls, each wrapped once."""
    if getattr(c, "_alloctune_pools_watched", False):
        return
    actions = {"_cuda_beginAllocateCurrentThreadToPool": "begin", "_cuda_beginAllocateToPool": "begin",
               "_cuda_endAllocateToPool": "end", "_cuda_releasePool": "release"}
    for name, action in actions.items():
        if hasattr(c, name):
            setattr(c, name, _timed(getattr(c, name), action))
    if hasattr(c, "_cuda_getCheckpointState") and hasattr(c, "_cuda_setCheckpointPoolState"):
        c._cuda_getCheckpointState = _checkpointed(c._cuda_getCheckpointState)
        c._cuda_setCheckpointPoolState = _restoring(c._cuda_setCheckpointPoolState)
    c._alloctune_pools_watched = True


def _timed(call: Callable[..., Any], action: str) -> Callable[..., Any]:
    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        out = call(*args, **kwargs)
        _quietly(_note_call, action, args, _now())
        return out
    return run


def _checkpointed(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def run(device: Any, pool: Any, *args: Any, **kwargs: Any) -> Any:
        state = call(device, pool, *args, **kwargs)
        _quietly(_kept, state, pool)
        return state
    return run


def _kept(state: Any, pool: Any) -> None:
    _checkpoints[id(state)] = (state, tuple(int(p) for p in pool))


def _restoring(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def run(device: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
        begun = _now() - 1
        out = call(device, state, *args, **kwargs)
        _quietly(_restored, device, state, begun, _now())
        return out
    return run


def _restored(device: Any, state: Any, begun: int, t: int) -> None:
    kept = _checkpoints.get(id(state))
    if kept is None:
        return   # a checkpoint taken before the watch: its allocations stay in the default pool, as before
    _note("begin", kept[1], None, device, begun)
    _note("end", kept[1], None, device, t)
    _note("release", kept[1], None, device, t)


def _note_call(action: str, args: tuple, t: int) -> None:
    device, pool = args[:2]   # torch's pool calls take (device, pool, ...)
    _note(action, pool, None, device, t)
