"""A simulator of PyTorch's native CUDA caching allocator, block by block.

It follows `c10/cuda/CUDACachingAllocator.cpp` and the allocator config of torch 2.11 (`../shared/ALLOCATOR.md`
§2-§4 summarises them): the same rounding, pools, segment sizes, best fit, split and merge rules,
`max_split_size_mb` / `max_non_split_rounding_mb` rejections, expandable segments, garbage collection under a
memory fraction, and the release-and-retry path before an OOM. What the real allocator does with a request
depends only on the requests before it, so replaying a recorded trace gives the same blocks, segments and
peaks as the run did, provided the device's memory, the budget and what the CUDA context holds outside the
allocator (`overhead_bytes`) are the same.

Where torch versions differ, `torch_version` picks the behaviour (switches from `versions.behaviour`):
- divisions of 1: plain 512-byte rounding from 2.4; no rounding at all (the size as asked) in 2.0-2.3.
- `>` in the divisions list: from 2.10 it covers the intervals after the last explicit entry; before 2.10 it
  also overwrote that last entry.
- a memory fraction (or budget) of the whole device: before 2.8 it still switches the limit and GC on; from
  2.8 only a fraction below 1 does.
- `large_segment_size_mb` (the segment for 1-10 MiB requests and the page of large-pool expandable segments)
  exists from 2.11; earlier versions use 20 MiB. A key that `torch_version` does not know raises `ConfError`.

Modelled as the source has it, and worth knowing:
- the fraction check before getting memory compares reserved + the *segment* size of the request with the
  allowed memory, also with expandable segments (where only the shortfall would be mapped);
- a cudaMalloc (or page map) fails when reserved + `overhead_bytes` + its size exceeds `device_memory`;
- GC counts a block's age in searches of its pool since it was freed; it and the oversize release only free
  whole, non-expandable segments; `num_alloc_retries` counts the last attempt after releasing every cached
  segment, whether or not it then succeeds; allocated bytes count a block unsplit, rounding included.

Not modelled: `record_stream` (a trace returns blocks at `free_completed`) and CUDA graph capture (a private
pool is a stream index of its own in the trace). Where the driver places segments is modelled as seen on an
H200: top down (see `_AddressSpace`); it decides ties between equal-sized free blocks.
`backend:cudaMallocAsync` hands memory to the driver's pool and cannot be simulated: it raises `ConfError`.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from itertools import count

from ..conf import AllocConf
from ..errors import ConfError
from ..versions import behaviour, check_keys

MiB = 1 << 20
MIN_BLOCK = 512                # every size is rounded to a multiple of this
SMALL_SIZE = 1 * MiB           # largest request of the small pool
SMALL_BUFFER = 2 * MiB         # small-pool segment, and page of small-pool expandable segments
MIN_LARGE_ALLOC = 10 * MiB     # requests below this (and above SMALL_SIZE) share a large segment
ROUND_LARGE = 2 * MiB          # larger requests get a segment of their own size rounded to this
DEFAULT_LARGE_SEGMENT = 20 * MiB
NO_LIMIT = (1 << 64) - 1       # max_split_size when unset (SIZE_MAX)
DIVISION_INTERVALS = 16        # divisions are kept per power-of-two interval from 1 MiB up

# Free blocks are kept per pool in a list sorted by (size, address), one int each: size << _SHIFT | address.
_SHIFT = 64
_MASK = (1 << _SHIFT) - 1
_VA_START, _VA_END = 1 << 32, 1 << 63  # the simulated virtual address space
_MAX_SEGMENT_SPACE = 1 << 50


class _Block:
    """A block of a segment: allocated, free (cached), or (expandable segments only) unmapped address space."""

    __slots__ = ("addr", "size", "pool", "prev", "next", "allocated", "requested", "mapped", "seg", "gc_base")

    def __init__(self, addr, size, pool, seg=None, mapped=True):
        self.addr = addr
        self.size = size
        self.pool = pool
        self.prev = None
        self.next = None
        self.allocated = False
        self.requested = 0
        self.mapped = mapped
        self.seg = seg            # the _Segment of an expandable segment, else None
        self.gc_base = 0          # the pool's search count when the block was last cached


class _Pool:
    """One stream's small or large pool: its cached blocks, and its expandable segments' unmapped ranges."""

    __slots__ = ("small", "keys", "unmapped")

    def __init__(self, small):
        self.small = small
        self.keys = []            # free mapped blocks: size << _SHIFT | addr, sorted
        self.unmapped = []        # addresses of unmapped blocks, sorted


class _Segment:
    """An expandable segment: reserved virtual address space of `size` bytes, mapped in pages of `page`."""

    __slots__ = ("base", "size", "page")

    def __init__(self, base, size, page):
        self.base, self.size, self.page = base, size, page


class _AddressSpace:
    """Virtual addresses for segments, handed out from the top down (the highest free range that fits, at its
    end), ranges merged back when released.

    Addresses decide ties in best fit (equal-sized free blocks: lowest address wins). On an H200 (driver 580,
    torch 2.11) cudaMalloc gave each new segment a lower address than the last: replaying six workloads' traces
    under six settings matched all 36 measured peaks within 0.013% with top-down placement, against errors of up
    to 9.4% (detection, list-form divisions) with bottom-up placement."""

    def __init__(self):
        self._free = [(_VA_START, _VA_END)]  # sorted, disjoint (start, end)

    def take(self, size: int) -> int:
        size = -(-size // ROUND_LARGE) * ROUND_LARGE
        for i in range(len(self._free) - 1, -1, -1):
            start, end = self._free[i]
            if end - start >= size:
                if end - start == size:
                    del self._free[i]
                else:
                    self._free[i] = (start, end - size)
                return end - size
        raise MemoryError("simulated virtual address space exhausted")

    def give(self, addr: int, size: int) -> None:
        size = -(-size // ROUND_LARGE) * ROUND_LARGE
        free = self._free
        i = bisect_left(free, (addr, 0))
        start, end = addr, addr + size
        if i < len(free) and free[i][0] == end:
            end = free.pop(i)[1]
        if i > 0 and free[i - 1][1] == start:
            i -= 1
            start = free.pop(i)[0]
        free.insert(i, (start, end))


def division_table(conf: AllocConf, gt_overwrites_last_entry: bool = False) -> list[int]:
    """Divisions per size interval [2^k MiB, 2^(k+1) MiB), k = 0..15 (the first also covers smaller sizes).

    List form: an entry 'B:d' sets the interval of B MiB and, if it is the first entry, every interval below;
    '>:d' sets the intervals after the last explicit entry (and that entry too before torch 2.10).
    """
    value = conf.roundup_power2_divisions
    table = [0] * DIVISION_INTERVALS
    if value is None:
        return table
    if isinstance(value, int):
        return [value] * DIVISION_INTERVALS
    last, first = 0, True
    for bound, div in value:
        if bound == ">":
            start = last if gt_overwrites_last_entry else last + 1
            table[start:] = [div] * (DIVISION_INTERVALS - start)
            continue
        index = min(int(bound).bit_length() - 1, DIVISION_INTERVALS - 1)
        if first:
            table[:index] = [div] * index
            first = False
        table[index] = div
        last = index
    return table


def round_size(size: int, table: list[int], divisions_one_rounds_512: bool = True) -> int:
    """The size the allocator reserves for a request of `size` bytes (its `round_size`)."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    bits = size.bit_length() - 1
    div = table[min(max(bits - 20, 0), DIVISION_INTERVALS - 1)]
    if div > 1 and size > MIN_BLOCK * div:
        if size & (size - 1) == 0:
            return size
        step = (1 << bits) >> (div.bit_length() - 1)
        return -(-size // step) * step
    if div == 1 and not divisions_one_rounds_512 and size > MIN_BLOCK:
        return size  # torch 2.0-2.3: one division meant no rounding at all
    return -(-size // MIN_BLOCK) * MIN_BLOCK


class Allocator:
    """One device's caching allocator under one setting. `malloc` returns a handle (the block's simulated
    address) or None when the request runs out of memory; `free` takes the handle back."""

    def __init__(self, conf: AllocConf, device_memory: int, *, budget_bytes: int | None = None,
                 overhead_bytes: int = 0, torch_version: str = "2.11"):
        if conf.is_async:
            raise ConfError("backend:cudaMallocAsync hands memory to the CUDA driver's pool, which cannot be "
                            "simulated block by block: measure it on the GPU")
        problem = check_keys(conf, torch_version)
        if problem:
            raise ConfError(f"cannot simulate {conf.label!r} as torch {torch_version}: {problem}")
        if device_memory <= 0:
            raise ConfError(f"device memory must be positive, got {device_memory}")
        if budget_bytes is not None and budget_bytes <= 0:
            raise ConfError(f"a memory budget must be positive, got {budget_bytes}")
        b = behaviour(torch_version)
        self.device_memory = device_memory
        self.overhead = overhead_bytes
        self.max_split = conf.max_split_size_mb * MiB if conf.max_split_size_mb else NO_LIMIT
        self.non_split_rounding = (conf.max_non_split_rounding_mb or 20) * MiB
        self.large_segment = (conf.large_segment_size_mb or 20) * MiB if b.has_large_segment_size \
            else DEFAULT_LARGE_SEGMENT
        self.divisions = division_table(conf, b.gt_overwrites_last_entry)
        self._rounds_512 = b.divisions_one_rounds_512
        self._rounded: dict[int, int] = {}   # request size -> round_size, filled as sizes come
        self.expandable = bool(conf.expandable_segments)
        self.allowed = self._allowed_memory(conf, budget_bytes, b.full_fraction_enables_gc)
        threshold = conf.garbage_collection_threshold or 0.0
        self.gc_threshold = threshold if self.allowed is not None and threshold > 0 else 0.0

        self._small_pools: dict[int, _Pool] = {}   # by stream
        self._large_pools: dict[int, _Pool] = {}
        self._blocks: dict[int, _Block] = {}   # every block (allocated, cached, unmapped) by address
        self._va = _AddressSpace()
        self._gc_searches = {True: 0, False: 0}  # get_free_block calls per pool kind (GC ages)
        self.reserved = self.reserved_peak = 0
        self.allocated = self.allocated_peak = 0
        self.requested = self.requested_peak = 0
        self.segments = self.segments_peak = 0
        self.num_alloc_retries = self.num_ooms = 0
        self.num_device_alloc = self.num_device_free = 0
        self.num_sync_all_streams = 0

    def _allowed_memory(self, conf: AllocConf, budget: int | None, full_fraction_counts: bool) -> int | None:
        """What a memory fraction allows, or None when no limit is in force (then GC is off as well)."""
        if budget is not None:
            if budget < self.device_memory or full_fraction_counts:
                return budget
            return None
        fraction = conf.per_process_memory_fraction
        if fraction is None or (fraction >= 1.0 and not full_fraction_counts):
            return None
        return int(fraction * self.device_memory)

    # ---------------------------------------------------------------- requests
    # malloc and free are the hot path: a replay calls one of them per trace event. So the common case of
    # each (a cached block fits; a freed block merges with its neighbours) is written out in one method,
    # `_malloc` and `_free`, rather than spread over helpers: in Python a call costs about as much as the
    # work it wraps. The rare paths (getting memory from the device, expandable best fit) keep methods of
    # their own.

    def malloc(self, size: int, stream: int = 0) -> int | None:
        block = self._malloc(size, stream)
        return None if block is None else block.addr

    def free(self, handle: int) -> None:
        block = self._blocks.get(handle)
        if block is None or not block.allocated:
            raise ValueError(f"free of handle {handle}, which is not an allocated block")
        self._free(block)

    def empty_cache(self) -> None:
        self._release_cached_blocks()

    def _malloc(self, size: int, stream: int) -> _Block | None:
        """`malloc` returning the block itself (None on OOM), which a replay hands back to `_free`."""
        rsize = self._rounded.get(size)
        if rsize is None:
            rsize = self._round(size)
        small = rsize <= SMALL_SIZE
        pool = (self._small_pools if small else self._large_pools).get(stream)
        if pool is None:
            pool = self._new_pool(stream, small)

        # get_free_block: the smallest cached block of at least rsize (lowest address among equals), unless
        # the max_split_size_mb rules refuse it: an oversize block (>= max_split) is never split for a smaller
        # request, and may be only max_non_split_rounding larger than an oversize one.
        if self.gc_threshold:
            self._gc_searches[small] += 1
        keys = pool.keys
        i = bisect_left(keys, rsize << _SHIFT)
        block = None
        if i < len(keys):
            if self.expandable:
                i = self._best_growable(keys, i)
            key = keys[i]
            bsize = key >> _SHIFT
            max_split = self.max_split
            if bsize < max_split or max_split <= rsize and bsize < rsize + self.non_split_rounding:
                del keys[i]
                block = self._blocks[key & _MASK]
        if block is None:
            block = self._device_block(pool, rsize)
            if block is None:
                return None
            keys = pool.keys  # releasing cached blocks may have replaced the list

        # alloc_found_block: split off the rest when it is worth keeping as a free block of its own.
        remaining = block.size - rsize
        if small or self.expandable:
            split = remaining >= MIN_BLOCK
        else:
            split = remaining > SMALL_SIZE and rsize < self.max_split
        if split:
            rest = _Block(block.addr + rsize, remaining, pool, block.seg)
            nxt = rest.next = block.next
            if nxt is not None:
                nxt.prev = rest
            rest.prev = block
            block.next = rest
            block.size = rsize
            self._blocks[rest.addr] = rest
            if self.gc_threshold:
                rest.gc_base = self._gc_searches[small]
            insort(keys, remaining << _SHIFT | rest.addr)
        block.allocated = True
        block.requested = size
        allocated = self.allocated = self.allocated + block.size
        if allocated > self.allocated_peak:
            self.allocated_peak = allocated
        requested = self.requested = self.requested + size
        if requested > self.requested_peak:
            self.requested_peak = requested
        return block

    def _free(self, block: _Block) -> None:
        """`free` of an allocated block: back to its pool's cache, merged with free mapped neighbours (whose
        keys leave the pool's list; merging is `_absorb_next` written out, for speed)."""
        block.allocated = False
        addr, size = block.addr, block.size
        self.allocated -= size
        self.requested -= block.requested
        pool = block.pool
        keys = pool.keys
        blocks = self._blocks
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated and prev.mapped:
            del keys[bisect_left(keys, prev.size << _SHIFT | prev.addr)]
            del blocks[addr]
            addr, size = prev.addr, prev.size + size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        if nxt is not None and not nxt.allocated and nxt.mapped:
            del keys[bisect_left(keys, nxt.size << _SHIFT | nxt.addr)]
            del blocks[nxt.addr]
            size += nxt.size
            nxt = block.next = nxt.next
            if nxt is not None:
                nxt.prev = block
        block.size = size
        if self.gc_threshold:
            block.gc_base = self._gc_searches[pool.small]
        insort(keys, size << _SHIFT | addr)

    def _round(self, size: int) -> int:
        """round_size of a size not seen before; remembered, since traces repeat a few sizes many times."""
        if size < 0:
            raise ValueError(f"cannot allocate a negative size: {size}")
        rsize = self._rounded[size] = round_size(size, self.divisions, self._rounds_512)
        return rsize

    def _new_pool(self, stream: int, small: bool) -> _Pool:
        pool = _Pool(small)
        (self._small_pools if small else self._large_pools)[stream] = pool
        return pool

    # ---------------------------------------------------------------- finding and placing blocks

    def _best_growable(self, keys: list, i: int) -> int:
        """Expandable segments' best fit, from index i of the pool's keys on: by the size a block could grow
        to, so that blocks not followed by unmapped space come first."""
        blocks = self._blocks
        best = None
        for j in range(i, len(keys)):
            block = blocks[keys[j] & _MASK]
            nxt = block.next
            size = block.size if nxt is None or nxt.mapped else block.size + nxt.size
            if best is not None and size >= best:
                break
            i, best = j, size
        return i

    def _device_block(self, pool: _Pool, rsize: int) -> _Block | None:
        """No cached block fits: a new segment (or newly mapped pages); when the device or the fraction is
        full, first free oversize cached blocks, then every cached segment, and retry. None on OOM."""
        if self.gc_threshold:
            self._garbage_collect()
        if pool.small:
            alloc_size = SMALL_BUFFER
        elif rsize < MIN_LARGE_ALLOC:
            alloc_size = self.large_segment
        else:
            alloc_size = -(-rsize // ROUND_LARGE) * ROUND_LARGE
        block = self._alloc_block(pool, rsize, alloc_size, False)
        if block is None and self._release_available_cached_blocks(pool, rsize):
            block = self._alloc_block(pool, rsize, alloc_size, False)
        if block is None:
            self._release_cached_blocks()
            block = self._alloc_block(pool, rsize, alloc_size, True)
        if block is None:
            self.num_ooms += 1
        return block

    def _absorb_next(self, lo: _Block, hi: _Block) -> None:
        """Merge `hi` into `lo`, its lower neighbour; the caller keeps the pool lists right."""
        lo.size += hi.size
        lo.next = hi.next
        if hi.next is not None:
            hi.next.prev = lo
        del self._blocks[hi.addr]

    # ---------------------------------------------------------------- getting memory from the device

    def _alloc_block(self, pool: _Pool, rsize: int, alloc_size: int, is_retry: bool) -> _Block | None:
        if is_retry:
            self.num_alloc_retries += 1
        if self.allowed is not None and self.reserved + alloc_size > self.allowed:
            return None
        if self.expandable:
            return self._try_allocate_expandable_block(pool, rsize)
        if self.reserved + self.overhead + alloc_size > self.device_memory:
            return None  # cudaMalloc fails
        block = _Block(self._va.take(alloc_size), alloc_size, pool)
        self._blocks[block.addr] = block
        self._grow_reserved(alloc_size)
        self.segments += 1
        if self.segments > self.segments_peak:
            self.segments_peak = self.segments
        return block

    def _grow_reserved(self, size: int) -> None:
        self.reserved += size
        if self.reserved > self.reserved_peak:
            self.reserved_peak = self.reserved
        self.num_device_alloc += 1

    def _release_block(self, block: _Block) -> None:
        """cudaFree a whole cached segment (already taken off its pool's list)."""
        del self._blocks[block.addr]
        self._va.give(block.addr, block.size)
        self.reserved -= block.size
        self.segments -= 1
        self.num_device_free += 1

    def _release_available_cached_blocks(self, pool: _Pool, rsize: int) -> bool:
        """Free oversize cached blocks (only with max_split_size_mb set): the smallest one at least as large as
        the request (and max_split), else the largest ones until that much is freed."""
        if self.max_split == NO_LIMIT or self.expandable:  # expandable blocks are skipped (2.5+)
            return False
        want = max(rsize, self.max_split)
        keys = pool.keys
        i = bisect_left(keys, want << _SHIFT)
        if i < len(keys):
            self._release_cached_key(keys, i)
            return True
        released = 0
        while released < want and i > 0 and keys[i - 1] >> _SHIFT >= self.max_split:
            i -= 1
            released += keys[i] >> _SHIFT
            self._release_cached_key(keys, i)
        return released >= want

    def _release_cached_key(self, keys: list, i: int) -> None:
        block = self._blocks[keys[i] & _MASK]
        del keys[i]
        self._release_block(block)

    def _release_cached_blocks(self) -> None:
        """What empty_cache and the last retry do: free every whole cached segment, unmap free pages."""
        self.num_sync_all_streams += 1
        for pool in [*self._large_pools.values(), *self._small_pools.values()]:
            if self.expandable:
                for key in list(pool.keys):
                    self._unmap_block(self._blocks[key & _MASK])
                continue
            keys = pool.keys
            kept = []
            for key in keys:
                block = self._blocks[key & _MASK]
                if block.prev is None and block.next is None:
                    self._release_block(block)
                else:
                    kept.append(key)
            pool.keys = kept

    # ---------------------------------------------------------------- garbage collection

    def _garbage_collect(self) -> None:
        """Free old cached whole segments of the large pools while reserved exceeds threshold x allowed."""
        limit = int(self.gc_threshold * self.allowed)
        if self.reserved <= limit:
            return
        target = self.reserved - limit
        now = self._gc_searches[False]
        candidates = []
        for pool in self._large_pools.values():
            for key in pool.keys:
                block = self._blocks[key & _MASK]
                if block.prev is None and block.next is None and block.seg is None:
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
                    keys = block.pool.keys
                    del keys[bisect_left(keys, block.size << _SHIFT | block.addr)]
                    self._release_block(block)
                else:
                    kept.append(block)
            candidates = kept

    # ---------------------------------------------------------------- expandable segments

    def _try_allocate_expandable_block(self, pool: _Pool, rsize: int) -> _Block | None:
        """Map just the shortfall at the lowest place with enough free + unmapped room; None if pages fail."""
        candidate = self._find_expandable_block(pool, rsize)
        if not candidate.mapped:
            candidate = self._map_block(candidate, min(candidate.size, rsize))
            if candidate is None:
                return None
        while candidate.size < rsize:
            nxt = candidate.next  # free -> unmapped: map part of the unmapped block, merging into this one
            candidate = self._map_block(nxt, min(rsize - candidate.size, nxt.size))
            if candidate is None:
                return None
        keys = pool.keys
        del keys[bisect_left(keys, candidate.size << _SHIFT | candidate.addr)]
        return candidate

    def _find_expandable_block(self, pool: _Pool, rsize: int) -> _Block:
        blocks = self._blocks
        for addr in pool.unmapped:
            start = blocks[addr]
            prev = start.prev
            if prev is not None and not prev.allocated:
                start = prev
            room, block = 0, start
            while room < rsize and block is not None and not block.allocated:
                room += block.size
                block = block.next
            if room >= rsize:
                return start
        # A new segment: virtual room for 1 1/8 of the device's memory, in whole pages. Capped at a PiB, which
        # no pool outgrows, so that capacity searches on absurdly large devices keep finding address space.
        page = SMALL_BUFFER if pool.small else self.large_segment
        total = min(self.device_memory, _MAX_SEGMENT_SPACE)
        size = -(-(total + total // 8) // page) * page
        seg = _Segment(self._va.take(size), size, page)
        block = _Block(seg.base, size, pool, seg, mapped=False)
        blocks[block.addr] = block
        insort(pool.unmapped, block.addr)
        return block

    def _map_block(self, block: _Block, size: int) -> _Block | None:
        """Map the pages covering the first `size` bytes of unmapped `block`; returns the free mapped block
        that results after merging with free neighbours, or None when the device has no room."""
        seg, pool = block.seg, block.pool
        page = seg.page
        mapped = -(-(block.addr + size - seg.base) // page) * page - (block.addr - seg.base)
        if self.reserved + self.overhead + mapped > self.device_memory:
            return None
        del pool.unmapped[bisect_left(pool.unmapped, block.addr)]
        block.mapped = True
        if mapped < block.size:
            rest = _Block(block.addr + mapped, block.size - mapped, pool, seg, mapped=False)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = mapped
            self._blocks[rest.addr] = rest
            insort(pool.unmapped, rest.addr)
        keys = pool.keys
        prev = block.prev
        if prev is not None and not prev.allocated and prev.mapped:
            del keys[bisect_left(keys, prev.size << _SHIFT | prev.addr)]
            self._absorb_next(prev, block)
            block = prev
        nxt = block.next
        if nxt is not None and not nxt.allocated and nxt.mapped:
            del keys[bisect_left(keys, nxt.size << _SHIFT | nxt.addr)]
            self._absorb_next(block, nxt)
        insort(keys, block.size << _SHIFT | block.addr)  # no GC age: GC skips expandable blocks
        self._grow_reserved(mapped)
        return block

    def _unmap_block(self, block: _Block) -> None:
        """Unmap the whole pages inside free `block`; partial pages at either end stay mapped and cached.
        A segment left with nothing mapped gives its address space back."""
        seg, pool = block.seg, block.pool
        page = seg.page
        first = -(-(block.addr - seg.base) // page)
        last = (block.addr + block.size - seg.base) // page
        if first >= last:
            return
        start, length = seg.base + first * page, (last - first) * page
        keys = pool.keys
        del keys[bisect_left(keys, block.size << _SHIFT | block.addr)]
        end = block.addr + block.size
        if start > block.addr:  # the partial page in front stays a free mapped block
            hole = _Block(start, length, pool, seg, mapped=False)
            hole.prev, hole.next = block, block.next
            if block.next is not None:
                block.next.prev = hole
            block.next = hole
            block.size = start - block.addr
            insort(keys, block.size << _SHIFT | block.addr)
            self._blocks[start] = hole
        else:
            hole = block
            hole.mapped = False
            hole.size = length
        if end > start + length:  # and so does the one behind
            tail = _Block(start + length, end - start - length, pool, seg)
            tail.prev, tail.next = hole, hole.next
            if hole.next is not None:
                hole.next.prev = tail
            hole.next = tail
            insort(keys, tail.size << _SHIFT | tail.addr)
            self._blocks[tail.addr] = tail
        unmapped = pool.unmapped
        prev = hole.prev
        if prev is not None and not prev.mapped:
            self._absorb_next(prev, hole)
            hole = prev
        else:
            insort(unmapped, hole.addr)
        nxt = hole.next
        if nxt is not None and not nxt.mapped:
            del unmapped[bisect_left(unmapped, nxt.addr)]
            self._absorb_next(hole, nxt)
        self.reserved -= length
        self.num_device_free += 1
        if hole.prev is None and hole.next is None:
            del unmapped[bisect_left(unmapped, hole.addr)]
            del self._blocks[hole.addr]
            self._va.give(seg.base, seg.size)

    # ---------------------------------------------------------------- statistics

    def stats(self) -> dict:
        """The torch.cuda.memory_stats() keys this simulator tracks (aggregate over pools)."""
        active = self.allocated
        return {
            "reserved_bytes.all.current": self.reserved, "reserved_bytes.all.peak": self.reserved_peak,
            "allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.allocated_peak,
            "requested_bytes.all.current": self.requested, "requested_bytes.all.peak": self.requested_peak,
            # without record_stream every active block is an allocated one
            "active_bytes.all.current": active, "active_bytes.all.peak": self.allocated_peak,
            "segment.all.current": self.segments, "segment.all.peak": self.segments_peak,
            "num_alloc_retries": self.num_alloc_retries, "num_ooms": self.num_ooms,
            "num_device_alloc": self.num_device_alloc, "num_device_free": self.num_device_free,
            "num_sync_all_streams": self.num_sync_all_streams,
            "max_split_size": -1 if self.max_split == NO_LIMIT else self.max_split,
        }


@dataclass(frozen=True)
class SimResult:
    conf: str
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    peak_requested_bytes: int
    num_alloc_retries: int
    num_ooms: int
    num_device_alloc: int
    num_device_free: int
    first_oom_index: int | None   # index of the first op that ran out of memory
    stats: dict


def _as_list(seq) -> list:
    # numpy arrays iterate as numpy scalars, which are slow and compare oddly as dict keys
    return seq.tolist() if hasattr(seq, "tolist") else seq


def simulate(ops, conf: AllocConf, device_memory: int, *, budget_bytes: int | None = None,
             overhead_bytes: int = 0, torch_version: str = "2.11") -> SimResult:
    """Replay `ops` (parallel sequences .kinds (0 alloc, 1 free), .addrs, .sizes, .streams) under `conf`.

    A trace address names the block allocated under it until it is freed. A free of an address that is not
    live (recording started mid-run, or its alloc ran out of memory) is ignored and counted in
    stats['ignored_frees']. An alloc that runs out of memory is skipped: the program would have failed there.
    """
    alloc = Allocator(conf, device_memory, budget_bytes=budget_bytes, overhead_bytes=overhead_bytes,
                      torch_version=torch_version)
    malloc, free = alloc._malloc, alloc._free  # blocks, not handles: no lookup of the handle on free
    live: dict = {}  # trace address -> its allocated block
    pop = live.pop
    ignored = 0
    first_oom = None
    ops_iter = zip(count(), _as_list(ops.kinds), _as_list(ops.addrs), _as_list(ops.sizes), _as_list(ops.streams))
    for i, kind, addr, size, stream in ops_iter:
        if kind == 0:
            block = malloc(size, stream)
            if block is None:
                if first_oom is None:
                    first_oom = i
            else:
                live[addr] = block
        else:
            block = pop(addr, None)
            if block is None:
                ignored += 1
            else:
                free(block)
    stats = alloc.stats()
    stats["ignored_frees"] = ignored
    return SimResult(
        conf=conf.label,
        peak_reserved_bytes=alloc.reserved_peak,
        peak_allocated_bytes=alloc.allocated_peak,
        peak_requested_bytes=alloc.requested_peak,
        num_alloc_retries=alloc.num_alloc_retries,
        num_ooms=alloc.num_ooms,
        num_device_alloc=alloc.num_device_alloc,
        num_device_free=alloc.num_device_free,
        first_oom_index=first_oom,
        stats=stats,
    )
