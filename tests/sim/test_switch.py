"""A run-time switch of the allocator setting in the Python simulator (`Allocator.switch`), as torch's run-time
parse makes it inside a running process (what an in-process confirmation's blocks meet): requests from then on
follow the new setting, the segments already made keep their kind, and emptying the cache releases each kind its
own way (whole ordinary segments freed, expandable pages unmapped), as torch's release_blocks does block by block.
The H100's memory history of such a process (results/h100-speed-model-v-2026-12-06) counted what this replays."""
from __future__ import annotations

from alloctune.settings.conf import AllocConf
from alloctune.sim.allocator import Allocator
from alloctune.units import GiB, MiB


def test_a_process_switched_to_expandable_segments_keeps_its_ordinary_segments_and_their_free_room():
    a = Allocator(AllocConf(), 80 * GiB)
    kept = a.malloc_block(4 * MiB, 0)            # a 20 MiB ordinary segment, 16 MiB of it free
    assert (a.cuda_mallocs, a.maps) == (1, 0)
    a.switch(AllocConf.parse("expandable_segments:True"))
    small = a.malloc_block(8 * MiB, 0)           # served from the ordinary segment's free room: no map
    assert (a.cuda_mallocs, a.maps) == (1, 0) and small.segment is None
    big = a.malloc_block(40 * MiB, 0)            # nothing free that large: a new expandable segment's pages
    assert (a.cuda_mallocs, a.maps, a.map_bytes) == (1, 1, 40 * MiB) and big.segment is not None
    a.free_block(small)
    a.free_block(big)
    a.empty_cache()                              # the pages unmapped; the ordinary segment, still holding `kept`, stays
    assert (a.unmaps, a.unmap_bytes, a.cuda_frees) == (1, 40 * MiB, 0)
    assert a.reserved == 20 * MiB
    a.free_block(kept)
    a.empty_cache()                              # now whole and free: cudaFree
    assert (a.cuda_frees, a.reserved) == (1, 0)


def test_switching_back_leaves_the_expandable_segment_to_its_own_rules():
    a = Allocator(AllocConf.parse("expandable_segments:True"), 80 * GiB)
    kept = a.malloc_block(30 * MiB, 0)
    a.switch(AllocConf())
    other = a.malloc_block(50 * MiB, 0)          # an ordinary segment now
    assert (a.maps, a.cuda_mallocs) == (1, 1) and other.segment is None and kept.segment is not None
    a.free_block(other)
    a.empty_cache()
    assert (a.cuda_frees, a.unmaps) == (1, 0) and a.reserved == 40 * MiB   # 30 MiB in two 20 MiB pages, kept
