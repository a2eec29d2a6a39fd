"""The caching allocator itself, in Python: the reference implementation of the simulator.

It follows `DeviceCachingAllocator` in `c10/cuda/CUDACachingAllocator.cpp` (torch 2.11), method for method
under upstream's names: `malloc` (`round_size`, `get_free_block`, `alloc_block`,
`release_available_cached_blocks`, `release_cached_blocks`, `alloc_found_block`), `free`,
`garbage_collect_cached_blocks`, and for expandable segments `try_allocate_expandable_block`,
`find_expandable_block`, `map_block`, `unmap_block` (those, with what the allocator holds of the device, in
`segments.py`). What a setting means is `config.AllocatorConfig`; blocks, pools and sizes are in `blocks.py`; replaying a trace is `simulate.py`, which runs the compiled core
(`_core.cpp`, the same algorithm in C++) when it is built and this class otherwise.

What the real allocator does with a request depends only on the requests before it, so replaying a recorded
trace gives the same blocks, segments and peaks as the run did, provided the device's memory, the budget and
what the CUDA context holds outside the allocator (`overhead_bytes`) are the same.

Modelled as the source has it, and worth knowing:
- the fraction check before getting memory compares reserved + the *segment* size of the request with the
  allowed memory, also with expandable segments (where only the shortfall would be mapped);
- a cudaMalloc (or page map) fails when reserved + `overhead_bytes` + its size exceeds `device_memory`;
- GC counts a block's age in searches of its pool since it was freed; it and the oversize release only free
  whole, non-expandable segments; `num_alloc_retries` counts the last attempt after releasing every cached
  segment, whether or not it then succeeds; allocated bytes count a block unsplit, rounding included.

CUDA graphs' private pools (`pools.py`): a stream index the trace puts in one allocates there; those blocks are
released only once no graph uses the pool; GC and its search counts see the default large pools only; a capture
underway skips the release of every cached block before an OOM. A block used on another stream (`record_stream`)
returns to its pool when the trace completes its free (`free_completed`: `free_block`), not when the program freed
it (`free_requested`: this class's `free_requested`); allocated bytes count it out at the request, active and
requested bytes at the completion, as torch's `free` and `free_block` do. Not modelled: a release of every cached block that in
torch would first complete the frees still waiting (`synchronize_and_free_events`) where the recording had none.
Where the driver places segments is modelled as seen on an H200: top down (`blocks.AddressSpace`); it decides ties
between equal-sized free blocks.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from ..settings.conf import AllocConf
from .blocks import (
    KEY_MASK,
    KEY_SHIFT,
    MIN_BLOCK,
    NO_LIMIT,
    SMALL_SIZE,
    Block,
    BlockPool,
    get_allocation_size,
    round_size,
)
from .config import allocator_config
from .pools import GraphPools, releasable
from .segments import Segments


class Allocator(Segments):
    """One device's caching allocator under one setting. `malloc` returns a handle (the block's simulated
    address) or None when the request runs out of memory; `free` takes the handle back. What it holds of the
    device (segments, reserved bytes, the mapping of expandable segments) is `Segments`'."""

    def __init__(self, conf: AllocConf, device_memory: int, *, budget_bytes: int | None = None,
                 overhead_bytes: int = 0, torch_version: str = "2.11"):
        self.config = c = allocator_config(conf, device_memory, budget_bytes=budget_bytes,
                                           overhead_bytes=overhead_bytes, torch_version=torch_version)
        self.torch_version = torch_version
        super().__init__(c.device_memory, c.overhead, c.large_segment)
        self.allowed = c.allowed
        self.max_split = c.max_split
        self.non_split_rounding = c.non_split_rounding
        self.expandable = c.expandable
        self.gc_threshold = c.gc_threshold
        self.graphs = GraphPools()
        self._rounded: dict[int, int] = {}   # request size -> round_size, filled as sizes come

        self._small_pools: dict[int, BlockPool] = {}   # by stream
        self._large_pools: dict[int, BlockPool] = {}
        self._gc_searches = {True: 0, False: 0}  # get_free_block calls per pool kind (GC ages)
        self.allocated = self.allocated_peak = 0
        self.active = self.active_peak = 0      # allocated, and freed blocks not yet back in their pool
        self._freed: set[int] = set()           # the blocks (addresses) freed, not yet back in their pool
        self.requested = self.requested_peak = 0
        self.num_alloc_retries = self.num_ooms = 0
        self.num_sync_all_streams = 0
        # waits for the device: a run of cudaFree / unmap calls with no work queued between them waits once
        # (the release of every cached segment, an oversize release or a GC pass that freed something)
        self.syncs = self.gc_passes = 0   # gc_passes: those that released a block

    # ---------------------------------------------------------------- requests

    def malloc(self, size: int, stream: int = 0) -> int | None:
        block = self.malloc_block(size, stream)
        return None if block is None else block.addr

    def free(self, handle: int) -> None:
        block = self._blocks.get(handle)
        if block is None or not block.allocated:
            raise ValueError(f"free of handle {handle}, which is not an allocated block")
        self.free_block(block)

    def empty_cache(self) -> None:
        self.release_cached_blocks()

    def switch(self, conf: AllocConf) -> None:
        """`conf` from now on, as torch's run-time parse sets it in a running process: the segments already made
        keep their kind. Python core only (what in-process blocks meet: scripts/jobs/switch_replay.py)."""
        c = allocator_config(conf, self.device_memory, overhead_bytes=self.overhead, torch_version=self.torch_version)
        self.config, self.max_split, self.non_split_rounding = c, c.max_split, c.non_split_rounding   # budget kept
        self.expandable, self.gc_threshold, self._rounded = c.expandable, c.gc_threshold, {}
        for pool in [*self._large_pools.values(), *self._small_pools.values()]:
            if pool.owner is None:
                pool.expandable = c.expandable

    def malloc_block(self, size: int, stream: int) -> Block | None:
        """`malloc` returning the block itself (None on OOM), which a replay hands back to `free_block`."""
        rsize = self._rounded.get(size)
        if rsize is None:
            rsize = self._round(size)
        small = rsize <= SMALL_SIZE
        pool = (self._small_pools if small else self._large_pools).get(stream)
        if pool is None:
            pool = self._new_pool(stream, small)
        block = self.get_free_block(pool, rsize)
        if block is None:
            if self.gc_threshold:
                self.garbage_collect_cached_blocks()
            # cudaMalloc a segment; when the device or the fraction is full, free cached oversize blocks, then
            # every cached segment, and try again; then give up: OOM.
            alloc_size = get_allocation_size(rsize, small, self.large_segment)
            block = self.alloc_block(pool, rsize, alloc_size, False)
            if block is None and self.release_available_cached_blocks(pool, rsize):
                block = self.alloc_block(pool, rsize, alloc_size, False)
            if block is None and not self.graphs.capturing:   # skipped while a CUDA graph is being captured
                self.release_cached_blocks()
                block = self.alloc_block(pool, rsize, alloc_size, True)
            if block is None:
                self.num_ooms += 1
                return None
        return self.alloc_found_block(block, pool, size, rsize)

    def get_free_block(self, pool: BlockPool, rsize: int) -> Block | None:
        """The smallest cached block of at least `rsize` (lowest address among equals), taken off the pool,
        unless the max_split_size_mb rules refuse it: an oversize block (>= max_split) is never split for a
        smaller request, and may be only max_non_split_rounding larger than an oversize one."""
        if self.gc_threshold and pool.owner is None:   # a private pool counts its own searches, which GC never reads
            self._gc_searches[pool.is_small] += 1
        keys = pool.blocks
        i = bisect_left(keys, rsize << KEY_SHIFT)
        if i == len(keys):
            return None
        if self.expandable:
            i = self._best_growable(keys, i)
        key = keys[i]
        bsize = key >> KEY_SHIFT
        max_split = self.max_split
        if bsize < max_split or max_split <= rsize and bsize < rsize + self.non_split_rounding:
            del keys[i]
            return self._blocks[key & KEY_MASK]
        return None

    def alloc_found_block(self, block: Block, pool: BlockPool, size: int, rsize: int) -> Block:
        """Split off the rest when it is worth keeping as a free block of its own; count the block allocated."""
        remaining = block.size - rsize
        if pool.is_small or self.expandable:
            split = remaining >= MIN_BLOCK
        else:
            split = remaining > SMALL_SIZE and rsize < self.max_split
        if split:
            rest = Block(block.addr + rsize, remaining, pool, block.segment)
            nxt = rest.next = block.next
            if nxt is not None:
                nxt.prev = rest
            rest.prev = block
            block.next = rest
            block.size = rsize
            self._blocks[rest.addr] = rest
            if self.gc_threshold:
                rest.gc_base = self._gc_searches[pool.is_small]
            insort(pool.blocks, remaining << KEY_SHIFT | rest.addr)
        block.allocated = True
        block.requested = size
        allocated = self.allocated = self.allocated + block.size
        if allocated > self.allocated_peak:
            self.allocated_peak = allocated
        active = self.active = self.active + block.size
        if active > self.active_peak:
            self.active_peak = active
        requested = self.requested = self.requested + size
        if requested > self.requested_peak:
            self.requested_peak = requested
        return block

    def free_requested(self, block: Block) -> None:
        """torch's `free` of a block used on another stream: counted out of the allocated bytes now, kept out of
        its pool (not merged, not reused) until `free_block`, as torch's event or capture deferral keeps it."""
        if block.addr not in self._freed:
            self._freed.add(block.addr)
            self.allocated -= block.size

    def free_block(self, block: Block) -> None:
        """`free` of an allocated block (`free_block`, after `free_requested` if that came first): back to its
        pool's cache, merged with free mapped neighbours (whose keys leave the pool's list). The hot path of a
        replay: the merges are written out, not calls."""
        block.allocated = False
        addr, size = block.addr, block.size
        if self._freed and addr in self._freed:
            self._freed.remove(addr)
        else:
            self.allocated -= size
        self.active -= size
        self.requested -= block.requested
        pool = block.pool
        keys = pool.blocks
        blocks = self._blocks
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated and prev.mapped:
            del keys[bisect_left(keys, prev.size << KEY_SHIFT | prev.addr)]
            del blocks[addr]
            addr, size = prev.addr, prev.size + size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        if nxt is not None and not nxt.allocated and nxt.mapped:
            del keys[bisect_left(keys, nxt.size << KEY_SHIFT | nxt.addr)]
            del blocks[nxt.addr]
            size += nxt.size
            nxt = block.next = nxt.next
            if nxt is not None:
                nxt.prev = block
        block.size = size
        if self.gc_threshold:
            block.gc_base = self._gc_searches[pool.is_small]
        insort(keys, size << KEY_SHIFT | addr)

    def _round(self, size: int) -> int:
        """round_size of a size not seen before; remembered, since traces repeat a few sizes many times."""
        if size < 0:
            raise ValueError(f"cannot allocate a negative size: {size}")
        rsize = self._rounded[size] = round_size(size, self.config.divisions, self.config.divisions_one_rounds_512)
        return rsize

    def _new_pool(self, stream: int, small: bool) -> BlockPool:
        owner = self.graphs.owner(stream)
        pool = BlockPool(small, owner, self.config.expandable_private if owner else self.expandable)
        (self._small_pools if small else self._large_pools)[stream] = pool
        return pool

    def _best_growable(self, keys: list[int], i: int) -> int:
        """Expandable segments' best fit, from index i of the pool's keys on: by the size a block could grow
        to, so that blocks not followed by unmapped space come first."""
        blocks = self._blocks
        best = None
        for j in range(i, len(keys)):
            block = blocks[keys[j] & KEY_MASK]
            nxt = block.next
            size = block.size if nxt is None or nxt.mapped else block.size + nxt.size
            if best is not None and size >= best:
                break
            i, best = j, size
        return i

    # ---------------------------------------------------------------- getting memory from the device

    def alloc_block(self, pool: BlockPool, rsize: int, alloc_size: int, is_retry: bool) -> Block | None:
        if is_retry:
            self.num_alloc_retries += 1
        if self.allowed is not None and self.reserved + alloc_size > self.allowed:
            return None
        if pool.expandable:
            return self.try_allocate_expandable_block(pool, rsize)
        if self.reserved + self.overhead + alloc_size > self.device_memory:
            return None  # cudaMalloc fails
        block = Block(self._va.take(alloc_size), alloc_size, pool)
        self._blocks[block.addr] = block
        self._grow_reserved(alloc_size)
        self.cuda_mallocs += 1
        self.cuda_malloc_bytes += alloc_size
        self.segments += 1
        if self.segments > self.segments_peak:
            self.segments_peak = self.segments
        return block

    def release_available_cached_blocks(self, pool: BlockPool, rsize: int) -> bool:
        """Free oversize cached blocks (only with max_split_size_mb set): the smallest one at least as large as
        the request (and max_split), else the largest ones until that much is freed."""
        if self.max_split == NO_LIMIT or pool.expandable:  # expandable blocks are skipped (2.5+)
            return False
        want = max(rsize, self.max_split)
        keys = pool.blocks
        i = bisect_left(keys, want << KEY_SHIFT)
        if i < len(keys):
            self.syncs += 1
            self._release_cached_key(keys, i)
            return True
        released = 0
        while released < want and i > 0 and keys[i - 1] >> KEY_SHIFT >= self.max_split:
            i -= 1
            released += keys[i] >> KEY_SHIFT
            self._release_cached_key(keys, i)
        self.syncs += released > 0
        return released >= want

    def _release_cached_key(self, keys: list[int], i: int) -> None:
        block = self._blocks[keys[i] & KEY_MASK]
        del keys[i]
        self.release_block(block)

    def release_cached_blocks(self) -> None:
        """What empty_cache and the last retry do: free every whole cached segment, unmap free pages (of the pools
        that may be released: `pools.releasable`)."""
        self.num_sync_all_streams += 1
        self.syncs += 1
        capturing = self.graphs.capturing > 0
        for pool in [*self._large_pools.values(), *self._small_pools.values()]:
            if not releasable(pool, capturing):
                continue
            # As torch's release_blocks, block by block: a pool holds both kinds after a run-time switch (`switch`)
            kept, unmapped = [], []
            for key in pool.blocks:
                block = self._blocks[key & KEY_MASK]
                if block.segment is not None:
                    unmapped.append(block)
                elif block.is_split():
                    kept.append(key)
                else:
                    self.release_block(block)
            pool.blocks = sorted(kept + [b.key for b in unmapped])
            for block in unmapped:
                self.unmap_block(block)

    # ---------------------------------------------------------------- garbage collection

    def garbage_collect_cached_blocks(self) -> None:
        """Free old cached whole segments of the large pools while reserved exceeds threshold x allowed."""
        assert self.allowed is not None  # GC is on only under a limit
        limit = int(self.gc_threshold * self.allowed)
        if self.reserved <= limit:
            return
        target = self.reserved - limit
        now = self._gc_searches[False]
        candidates = []
        for pool in self._large_pools.values():
            if pool.owner is not None:
                continue
            for key in pool.blocks:
                block = self._blocks[key & KEY_MASK]
                if not block.is_split() and block.segment is None:
                    candidates.append(block)
        total_age = sum(now - b.gc_base for b in candidates)
        count = len(candidates)
        reclaimed, freed = 0, True
        while reclaimed < target and freed and count > 0:
            threshold = total_age / count
            freed = False
            kept = []
            for block in candidates:
                age = now - block.gc_base
                if age >= threshold:
                    freed = True
                    reclaimed += block.size
                    total_age -= age
                    count -= 1
                    block.pool.remove(block)
                    self.release_block(block)
                else:
                    kept.append(block)
            candidates = kept
        if reclaimed:
            self.gc_passes += 1
            self.syncs += 1

    def stats(self) -> dict:
        """The torch.cuda.memory_stats() keys this simulator tracks (aggregate over pools)."""
        return memory_stats([getattr(self, name) for name in COUNTERS], self.max_split)


# The driver work (results.records.DriverWork's figures, in its order) as the allocator counts it: counter names.
DRIVER_COUNTERS = ("cuda_mallocs", "cuda_malloc_bytes", "cuda_frees", "cuda_free_bytes", "maps", "map_bytes",
                   "unmaps", "unmap_bytes", "syncs", "num_alloc_retries", "gc_passes")
# What a replay reads at each mark (simulate.py): the driver counters, and the peak reserved so far.
MARK_COUNTERS = (*DRIVER_COUNTERS, "reserved_peak")
# The allocator's counters, in the order the compiled core returns them.
COUNTERS = ("reserved", "reserved_peak", "allocated", "allocated_peak", "requested", "requested_peak",
            "segments", "segments_peak", "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
            "num_sync_all_streams", "cuda_mallocs", "cuda_malloc_bytes", "cuda_frees", "cuda_free_bytes", "maps",
            "map_bytes", "unmaps", "unmap_bytes", "syncs", "gc_passes", "active", "active_peak")


def memory_stats(counters: list[int], max_split: int) -> dict:
    """`COUNTERS` as the torch.cuda.memory_stats() keys they stand for."""
    c = dict(zip(COUNTERS, counters))
    return {
        "reserved_bytes.all.current": c["reserved"], "reserved_bytes.all.peak": c["reserved_peak"],
        "allocated_bytes.all.current": c["allocated"], "allocated_bytes.all.peak": c["allocated_peak"],
        "requested_bytes.all.current": c["requested"], "requested_bytes.all.peak": c["requested_peak"],
        "active_bytes.all.current": c["active"], "active_bytes.all.peak": c["active_peak"],
        "segment.all.current": c["segments"], "segment.all.peak": c["segments_peak"],
        "num_alloc_retries": c["num_alloc_retries"], "num_ooms": c["num_ooms"],
        "num_device_alloc": c["num_device_alloc"], "num_device_free": c["num_device_free"],
        "num_sync_all_streams": c["num_sync_all_streams"],
        "max_split_size": -1 if max_split == NO_LIMIT else max_split,
    }
