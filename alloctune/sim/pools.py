"""CUDA graphs' private memory pools as the caching allocator keeps them (c10/cuda/CUDACachingAllocator.cpp, "Interaction
with CUDA graph capture": `PrivatePool` and its `use_count`, `captures_underway`, `beginAllocateToPool`,
`endAllocateToPool`, `releasePool`), driven by a trace's pool events (`entries.py` makes them):

- POOL_BEGIN p: a capture into pool p begins (`beginAllocateToPool`: the pool is made, or shared, and its use count
  goes up; while any capture is underway the allocator skips the release-everything-and-retry before an OOM);
- POOL_STREAM p s: the trace's stream index s allocates in pool p (the allocations the capture routed there);
- POOL_END p: the capture ends (`endAllocateToPool`);
- POOL_RELEASE p: a graph that used p is destroyed or reset (`releasePool`): at use count 0 its cached blocks may
  be released (by empty_cache or the retry), and not before.
An event of a pool that never began is ignored, as is an end or release with nothing to end or release.
"""
from __future__ import annotations

from .blocks import BlockPool, PrivatePool
from .entries import POOL_BEGIN, POOL_END, POOL_RELEASE, POOL_STREAM


class GraphPools:
    """The private pools of one device's allocator, and which stream index allocates in which."""

    def __init__(self) -> None:
        self._pools: dict[int, PrivatePool] = {}
        self._of_stream: dict[int, PrivatePool] = {}
        self.capturing = 0   # captures underway, in every pool

    def event(self, kind: int, number: int, stream: int) -> None:
        pool = self._pools.get(number)
        if kind == POOL_BEGIN:
            if pool is None:
                pool = self._pools[number] = PrivatePool()
            pool.use_count += 1
            pool.capturing += 1
            self.capturing += 1
        elif pool is None:
            return
        elif kind == POOL_END and pool.capturing:
            pool.capturing -= 1
            self.capturing -= 1
        elif kind == POOL_RELEASE and pool.use_count:
            pool.use_count -= 1
        elif kind == POOL_STREAM:
            self._of_stream.setdefault(stream, pool)

    def owner(self, stream: int) -> PrivatePool | None:
        """The private pool stream index `stream` allocates in; None: the default pools."""
        return self._of_stream.get(stream)


def releasable(pool: BlockPool, capturing: bool) -> bool:
    """Whether the release of every cached block (empty_cache, the retry) frees `pool`'s: a private pool's only once
    no graph uses it; the default pools' not while a capture is underway (`release_cached_blocks`)."""
    return pool.owner.use_count == 0 if pool.owner is not None else not capturing
