"""A recording's CUDA graph captures (meta "pool_events", as the start-up hook notes them) turned into the
simulator's pool events among a snapshot's entries (sim/captures.py, sim/entries.py), and what a replay of the
result keeps."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from alloctune.errors import TraceError
from alloctune.settings.conf import AllocConf
from alloctune.sim.simulate import simulate
from alloctune.sim.trace import (ALLOC, EMPTY_CACHE, FREE, POOL_BEGIN, POOL_END, POOL_RELEASE, POOL_STREAM,
                                 load_trace, save_trace)

MiB = 1 << 20
CAPTURE_STREAM = 0x5A5A
POOL = [1, 0]


def entry(action, addr, size, t, stream=0, **extra):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": [], **extra}


def event(action, t, pool=POOL, stream=CAPTURE_STREAM, **extra):
    return {"time_us": t, "action": action, "pool": pool, "stream": stream, "device": 0, **extra}


def load(tmp_path, entries, pool_events=None, segments=()):
    snapshot = {"segments": list(segments), "device_traces": [entries]}
    if pool_events is not None:
        snapshot["alloctune"] = {"pool_events": pool_events}
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    return load_trace(path)


def graph_job():
    """An eager allocation, a capture (two allocations on the capture stream, one freed inside it, one on another
    stream), the graph's destruction, an eager allocation after; times in µs."""
    entries = [entry("alloc", 0x100, 8 * MiB, 10),
               entry("alloc", 0x200, 30 * MiB, 20, CAPTURE_STREAM), entry("free_completed", 0x200, 30 * MiB, 21,
                                                                          CAPTURE_STREAM),
               entry("alloc", 0x300, 30 * MiB, 22, CAPTURE_STREAM), entry("alloc", 0x400, MiB, 23),
               entry("free_completed", 0x300, 30 * MiB, 40, CAPTURE_STREAM), entry("alloc", 0x500, 30 * MiB, 50)]
    return entries, [event("begin", 19), event("end", 30), event("release", 45)]   # each noted once its call returned


def test_captures_become_pool_events_and_route_the_capture_streams_allocations(tmp_path):
    entries, events = graph_job()
    trace = load(tmp_path, entries, events)
    assert trace.kinds == [ALLOC, POOL_BEGIN, POOL_STREAM, ALLOC, FREE, ALLOC, ALLOC, POOL_END, FREE, POOL_RELEASE,
                           ALLOC]
    assert trace.meta["pools"] == [POOL]
    assert trace.meta["streams"] == [[0, 0, 0], [CAPTURE_STREAM, *POOL]]
    assert trace.streams[2] == 1 and trace.addrs[1:3] == [1, 1]     # stream index 1 allocates in pool 1
    assert [trace.streams[i] for i in (3, 5, 6, 10)] == [1, 1, 0, 0]  # another stream is not captured
    replayed = simulate(trace, AllocConf.parse(""), 80 << 30)
    # the graph's 30 MiB segment, served twice inside the capture, is not the eager job's: 20 + 30 + 2 + 30 MiB
    assert replayed.peak_reserved_bytes == 82 * MiB


def test_entries_pool_ids_win_and_a_side_stream_in_the_capture_goes_to_the_pool(tmp_path):
    entries, events = graph_job()
    entries[4]["pool_id"] = POOL          # newer torch names the pool: this side stream was in the capture
    entries[0]["pool_id"] = [0, 0]
    trace = load(tmp_path, entries, events)
    assert trace.meta["streams"] == [[0, 0, 0], [CAPTURE_STREAM, *POOL], [0, *POOL]]
    assert trace.kinds.count(POOL_STREAM) == 2 and trace.kinds.count(POOL_BEGIN) == 1


def test_a_capture_of_every_stream_of_the_thread(tmp_path):
    """cudagraph trees' warm-up allocates in the pool on whatever stream (beginAllocateCurrentThreadToPool)."""
    entries = [entry("alloc", 0x100, MiB, 10, 7), entry("alloc", 0x200, MiB, 11, 8), entry("alloc", 0x300, MiB, 30)]
    trace = load(tmp_path, entries, [event("begin", 9, stream=None), event("end", 20), event("release", 21)])
    assert trace.meta["streams"] == [[7, *POOL], [8, *POOL], [0, 0, 0]]


def test_a_checkpoint_restored_outside_a_capture_allocates_in_its_pool(tmp_path):
    """cudagraph trees, before it records on a new branch, restores the pool to a checkpoint: every block of the pool
    freed and the checkpoint's blocks allocated again at their addresses, outside any capture (the H200's compiled
    job replayed 212 MiB against 100 MiB while those went to the default pool). The hook notes the call as a begin of
    every stream, an end and a release, so the use count of the pool stays as the graph left it."""
    entries = [entry("alloc", 0x200, 30 * MiB, 20, CAPTURE_STREAM),                     # the graph's output
               entry("free_completed", 0x200, 30 * MiB, 60, CAPTURE_STREAM),            # the restore frees it...
               entry("alloc", 0x200, 30 * MiB, 61, CAPTURE_STREAM),                     # ...and makes it again
               entry("alloc", 0x500, 8 * MiB, 80), entry("free_completed", 0x200, 30 * MiB, 90, CAPTURE_STREAM)]
    capture = [event("begin", 19), event("end", 30)]
    restore = [event("begin", 59, stream=None), event("end", 62, stream=None), event("release", 62, stream=None)]
    unplaced = simulate(load(tmp_path, entries, capture), AllocConf.parse(""), 80 << 30)
    assert unplaced.peak_reserved_bytes == (30 + 30 + 20) * MiB   # the block made again in a new default segment
    trace = load(tmp_path, entries, capture + restore)
    assert trace.kinds.count(POOL_BEGIN) == 2 and trace.kinds.count(POOL_RELEASE) == 1
    assert simulate(trace, AllocConf.parse(""), 80 << 30).peak_reserved_bytes == (30 + 20) * MiB


def test_torch_cuda_graph_empties_the_cache_before_it_captures(tmp_path):
    entries, events = graph_job()
    events[0]["empty_cache"] = True
    trace = load(tmp_path, entries, events)
    assert trace.kinds[1:3] == [EMPTY_CACHE, POOL_BEGIN] and trace.meta["empty_cache_calls"] == 1
    released = [entry("segment_free", 0x900, 2 * MiB, 15)]   # the recording's own release shows that call already
    trace = load(tmp_path, entries[:1] + released + entries[1:], events)
    assert trace.kinds[1:3] == [EMPTY_CACHE, POOL_BEGIN] and trace.meta["empty_cache_calls"] == 1


def test_what_torch_allocates_in_the_microsecond_its_capture_began_stays_in_the_default_pool(tmp_path):
    """capture_begin allocates the RNG's seed and offset (a process's first capture) before it switches to the pool;
    the hook notes the begin when the call has returned, which may be the same microsecond."""
    entries, events = graph_job()
    seed = entry("alloc", 0x600, 512, 19, CAPTURE_STREAM)
    trace = load(tmp_path, entries[:1] + [seed] + entries[1:], events)
    assert trace.kinds[:4] == [ALLOC, ALLOC, POOL_BEGIN, POOL_STREAM]
    assert trace.meta["streams"][trace.streams[1]] == [CAPTURE_STREAM, 0, 0]   # the default pool's
    assert trace.meta["streams"][trace.streams[4]] == [CAPTURE_STREAM, *POOL]  # the capture's first allocation


def test_a_pool_known_only_from_entries_is_kept_to_the_end_with_a_warning(tmp_path):
    entries = [entry("alloc", 0x100, MiB, 10, pool_id=POOL), entry("alloc", 0x200, MiB, 11)]
    trace = load(tmp_path, entries)
    assert trace.kinds == [POOL_BEGIN, POOL_END, POOL_STREAM, ALLOC, ALLOC]
    assert any("no capture of them was recorded" in w for w in trace.warnings)


def test_graph_segments_without_pool_ids_are_said(tmp_path):
    segments = [{"device": 0, "address": 0x100, "total_size": 2 * MiB, "segment_pool_id": (1, 0), "blocks": []}]
    trace = load(tmp_path, [entry("alloc", 0x100, MiB, 10)], segments=segments)
    assert trace.meta["pools"] == [] and any("include CUDA graph pools" in w for w in trace.warnings)
    assert not load(tmp_path, [entry("alloc", 0x100, MiB, 10)]).warnings


def test_untimed_entries_cannot_place_captures(tmp_path):
    entries, events = graph_job()
    for e in entries:
        del e["time_us"]
    trace = load(tmp_path, entries, events)
    assert POOL_BEGIN not in trace.kinds and any("cannot be placed" in w for w in trace.warnings)


@pytest.mark.parametrize("bad", [{"action": "begin"}, event("start", 1), event("begin", 1, pool=[1]),
                                 event("end", 1, stream="s"), "begin"])
def test_a_damaged_pool_event_is_refused(tmp_path, bad):
    with pytest.raises(TraceError, match="pool_events"):
        load(tmp_path, graph_job()[0], [bad])


def test_a_loaded_capture_survives_the_compact_format(tmp_path):
    trace = load(tmp_path, *graph_job())
    save_trace(trace, tmp_path / "t.xz")
    back = load_trace(tmp_path / "t.xz")
    assert (back.kinds, back.addrs, back.streams, back.meta["pools"]) == \
           (trace.kinds, trace.addrs, trace.streams, trace.meta["pools"])
    assert simulate(back, AllocConf.parse(""), 80 << 30) == simulate(trace, AllocConf.parse(""), 80 << 30)


def test_a_cudagraph_trees_recording_from_the_h200_replays_to_the_byte():
    """tests/fixtures/graphs/README.md: warm-ups, recordings and checkpoint restores in one pool."""
    trace = load_trace(Path(__file__).parents[1] / "fixtures" / "graphs" / "cudagraph-trees.pickle")
    measured = trace.meta["measured"][0]
    assert trace.kinds.count(POOL_BEGIN) >= 4 and len(trace.meta["pools"]) == 1
    replayed = simulate(trace, AllocConf.parse(measured["conf"]), trace.meta["device_total_bytes"],
                        overhead_bytes=trace.meta["overhead_bytes"], torch_version=trace.meta["torch_version"])
    assert replayed.peak_reserved_bytes == measured["peak_reserved_bytes"] == 100 * MiB
