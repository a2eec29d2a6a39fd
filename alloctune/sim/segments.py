"""What the caching allocator holds of the device: its segments, block by block in address order, the bytes
reserved, and for expandable segments the mapping of pages (upstream's `try_allocate_expandable_block`,
`find_expandable_block`, `map_block`, `unmap_block` in `c10/cuda/CUDACachingAllocator.cpp`). `allocator.Allocator`
builds on it with the pools, the splitting and the release policies.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from .blocks import MAX_SEGMENT_SPACE, SMALL_BUFFER, AddressSpace, Block, BlockPool, ExpandableSegment


class Segments:
    """Segments of one device's allocator. A cudaMalloc (or page map) fails when reserved + `overhead` + its
    size would pass `device_memory`; `large_segment` is the page of large-pool expandable segments."""

    def __init__(self, device_memory: int, overhead: int, large_segment: int):
        self.device_memory = device_memory
        self.overhead = overhead
        self.large_segment = large_segment
        self._blocks: dict[int, Block] = {}   # every block (allocated, cached, unmapped) by address
        self._va = AddressSpace()
        self.reserved = self.reserved_peak = 0
        self.segments = self.segments_peak = 0
        self.num_device_alloc = self.num_device_free = 0
        # the driver calls behind those (DriverWork's figures): cudaMalloc and cudaFree of whole segments, and the
        # page ranges of expandable segments mapped and unmapped, each with its bytes
        self.cuda_mallocs = self.cuda_malloc_bytes = self.cuda_frees = self.cuda_free_bytes = 0
        self.maps = self.map_bytes = self.unmaps = self.unmap_bytes = 0

    def _grow_reserved(self, size: int) -> None:
        self.reserved += size
        if self.reserved > self.reserved_peak:
            self.reserved_peak = self.reserved
        self.num_device_alloc += 1

    def release_block(self, block: Block) -> None:
        """cudaFree a whole cached segment (already taken off its pool's list)."""
        del self._blocks[block.addr]
        self._va.give(block.addr, block.size)
        self.reserved -= block.size
        self.segments -= 1
        self.num_device_free += 1
        self.cuda_frees += 1
        self.cuda_free_bytes += block.size

    def _absorb_next(self, lo: Block, hi: Block) -> None:
        """Merge `hi` into `lo`, its lower neighbour; the caller keeps the pool lists right."""
        lo.size += hi.size
        lo.next = hi.next
        if hi.next is not None:
            hi.next.prev = lo
        del self._blocks[hi.addr]

    def try_allocate_expandable_block(self, pool: BlockPool, rsize: int) -> Block | None:
        """Map just the shortfall at the lowest place with enough free + unmapped room; None if pages fail."""
        candidate: Block | None = self.find_expandable_block(pool, rsize)
        assert candidate is not None
        if not candidate.mapped:
            candidate = self.map_block(candidate, min(candidate.size, rsize))
            if candidate is None:
                return None
        while candidate.size < rsize:
            nxt = candidate.next  # free -> unmapped: map part of the unmapped block, merging into this one
            assert nxt is not None
            candidate = self.map_block(nxt, min(rsize - candidate.size, nxt.size))
            if candidate is None:
                return None
        pool.remove(candidate)
        return candidate

    def find_expandable_block(self, pool: BlockPool, rsize: int) -> Block:
        blocks = self._blocks
        walk: Block | None
        for addr in pool.unmapped:
            start = blocks[addr]
            prev = start.prev
            if prev is not None and not prev.allocated:
                start = prev
            room, walk = 0, start
            while room < rsize and walk is not None and not walk.allocated:
                room += walk.size
                walk = walk.next
            if room >= rsize:
                return start
        # A new segment: virtual room for 1 1/8 of the device's memory, in whole pages. Capped at a PiB, which
        # no pool outgrows, so that capacity searches on absurdly large devices keep finding address space.
        page = SMALL_BUFFER if pool.is_small else self.large_segment
        total = min(self.device_memory, MAX_SEGMENT_SPACE)
        size = -(-(total + total // 8) // page) * page
        segment = ExpandableSegment(self._va.take(size), size, page)
        block = Block(segment.base, size, pool, segment, mapped=False)
        blocks[block.addr] = block
        insort(pool.unmapped, block.addr)
        return block

    def map_block(self, block: Block, size: int) -> Block | None:
        """Map the pages covering the first `size` bytes of unmapped `block`; returns the free mapped block
        that results after merging with free neighbours, or None when the device has no room."""
        segment, pool = block.segment, block.pool
        assert segment is not None
        page = segment.page
        mapped = -(-(block.addr + size - segment.base) // page) * page - (block.addr - segment.base)
        if self.reserved + self.overhead + mapped > self.device_memory:
            return None
        del pool.unmapped[bisect_left(pool.unmapped, block.addr)]
        block.mapped = True
        if mapped < block.size:
            rest = Block(block.addr + mapped, block.size - mapped, pool, segment, mapped=False)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = mapped
            self._blocks[rest.addr] = rest
            insort(pool.unmapped, rest.addr)
        prev = block.prev
        if prev is not None and not prev.allocated and prev.mapped:
            pool.remove(prev)
            self._absorb_next(prev, block)
            block = prev
        nxt = block.next
        if nxt is not None and not nxt.allocated and nxt.mapped:
            pool.remove(nxt)
            self._absorb_next(block, nxt)
        insort(pool.blocks, block.key)  # no GC age: GC skips expandable blocks
        self._grow_reserved(mapped)
        self.maps += 1
        self.map_bytes += mapped
        return block

    def unmap_block(self, block: Block) -> None:
        """Unmap the whole pages inside free `block`; partial pages at either end stay mapped and cached.
        A segment left with nothing mapped gives its address space back."""
        segment, pool = block.segment, block.pool
        assert segment is not None
        page = segment.page
        first = -(-(block.addr - segment.base) // page)
        last = (block.addr + block.size - segment.base) // page
        if first >= last:
            return
        start, length = segment.base + first * page, (last - first) * page
        pool.remove(block)
        end = block.addr + block.size
        if start > block.addr:  # the partial page in front stays a free mapped block
            hole = Block(start, length, pool, segment, mapped=False)
            hole.prev, hole.next = block, block.next
            if block.next is not None:
                block.next.prev = hole
            block.next = hole
            block.size = start - block.addr
            insort(pool.blocks, block.key)
            self._blocks[start] = hole
        else:
            hole = block
            hole.mapped = False
            hole.size = length
        if end > start + length:  # and so does the one behind
            tail = Block(start + length, end - start - length, pool, segment)
            tail.prev, tail.next = hole, hole.next
            if hole.next is not None:
                hole.next.prev = tail
            hole.next = tail
            insort(pool.blocks, tail.key)
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
        self.unmaps += 1
        self.unmap_bytes += length
        if not hole.is_split():
            del unmapped[bisect_left(unmapped, hole.addr)]
            del self._blocks[hole.addr]
            self._va.give(segment.base, segment.size)
