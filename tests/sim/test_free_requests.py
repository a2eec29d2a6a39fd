"""Frees whose completion waits (a block used on another stream, freed during a CUDA graph capture): torch counts the
block out of its allocated bytes at `free_requested` and returns it to its pool at `free_completed`; the trace keeps
the request as a FREE_REQUESTED event (sim/entries.py) and both cores count it so (sim/allocator.py, _core.cpp)."""
from __future__ import annotations

import lzma
import pickle
from pathlib import Path

import pytest

from alloctune.errors import TraceError
from alloctune.settings.conf import AllocConf
from alloctune.sim.simulate import core_notice, simulate
from alloctune.sim.trace import (ALLOC, FREE, FREE_REQUESTED, POOL_BEGIN, POOL_END, POOL_STREAM, Trace, load_trace,
                                 save_trace)

MiB = 1 << 20
FIXTURES = Path(__file__).parents[1] / "fixtures" / "graphs"
SETTINGS = ("default", "expandable", "max-split", "roundup")   # the recordings' names
CAPTURE_STREAM = 0x5A5A
CORES = ["python", "compiled"] if core_notice() is None else ["python"]


def entry(action, addr, size, t, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": []}


def load(tmp_path, entries, pool_events=()):
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries],
                                   "alloctune": {"pool_events": list(pool_events)}}))
    return load_trace(path)


def replay(trace: Trace, conf: str = ""):
    results = [simulate(trace, AllocConf.parse(conf), 80 << 30, core=core) for core in CORES]
    assert all(r == results[0] for r in results[1:])
    return results[0]


def capture(t_begin, t_end):
    return [{"time_us": t, "action": action, "pool": [1, 0], "stream": CAPTURE_STREAM, "device": 0}
            for t, action in ((t_begin, "begin"), (t_end, "end"))]


def deferred_job():
    """64 MiB of gradients made eagerly and used on the capture stream, freed inside a capture (zero_grad in the
    captured step): their completion waits for the first request after the capture; the capture's own 96 MiB."""
    return [entry("alloc", 0x100, 64 * MiB, 10),
            entry("free_requested", 0x100, 64 * MiB, 20),
            entry("alloc", 0x200, 96 * MiB, 21, CAPTURE_STREAM),
            entry("free_completed", 0x100, 64 * MiB, 40),
            entry("alloc", 0x300, 8 * MiB, 40)], capture(19, 30)


def test_a_free_deferred_past_a_capture_leaves_the_allocated_bytes_at_its_request(tmp_path):
    trace = load(tmp_path, *deferred_job())
    assert trace.kinds == [ALLOC, POOL_BEGIN, POOL_STREAM, FREE_REQUESTED, ALLOC, POOL_END, FREE, ALLOC]
    result = replay(trace)
    # torch: 64 MiB, 0 at the request, 96 MiB in the capture, 104 MiB after; the block held until its completion
    assert result.peak_allocated_bytes == 104 * MiB
    assert result.stats["active_bytes.all.peak"] == 160 * MiB
    assert result.peak_reserved_bytes == 160 * MiB   # the 8 MiB after the completion reuse the block it returned
    assert result.peak_requested_bytes == 160 * MiB   # torch counts requested bytes out at the completion
    assert result.stats["allocated_bytes.all.current"] == result.stats["active_bytes.all.current"] == 104 * MiB


def test_a_free_completed_right_after_its_request_is_one_free(tmp_path):
    entries = [entry("alloc", 0x100, 64 * MiB, 10), entry("free_requested", 0x100, 64 * MiB, 11),
               entry("free_completed", 0x100, 64 * MiB, 11), entry("alloc", 0x200, 64 * MiB, 12)]
    trace = load(tmp_path, entries)
    assert trace.kinds == [ALLOC, FREE, ALLOC]
    assert replay(trace).peak_allocated_bytes == 64 * MiB


def test_requests_completed_together_before_the_next_allocation_are_plain_frees(tmp_path):
    """zero_grad frees every gradient, each used on another stream; their events are all done at the next request."""
    entries = [entry("alloc", 0x100, MiB, 10), entry("alloc", 0x200, MiB, 10), entry("free_requested", 0x100, MiB, 11),
               entry("free_requested", 0x200, MiB, 11), entry("free_completed", 0x100, MiB, 12),
               entry("free_completed", 0x200, MiB, 12), entry("alloc", 0x300, MiB, 12)]
    assert load(tmp_path, entries).kinds == [ALLOC, ALLOC, FREE, FREE, ALLOC]


def test_a_request_still_waiting_at_the_snapshot_is_counted_out_and_its_block_kept(tmp_path):
    entries = [entry("alloc", 0x100, 64 * MiB, 10), entry("free_requested", 0x100, 64 * MiB, 11)]
    trace = load(tmp_path, entries)
    assert trace.kinds == [ALLOC, FREE_REQUESTED] and trace.meta["live_at_end"] == 1
    result = replay(trace)
    assert (result.stats["allocated_bytes.all.current"], result.stats["active_bytes.all.current"]) == (0, 64 * MiB)


def test_requests_of_blocks_from_before_the_recording_are_dropped_with_their_completion(tmp_path):
    entries = [entry("free_requested", 0x900, MiB, 5), entry("alloc", 0x100, MiB, 6),
               entry("free_completed", 0x900, MiB, 7)]
    trace = load(tmp_path, entries)
    assert trace.kinds == [ALLOC] and trace.meta["dropped_frees"] == 1


def test_a_request_needs_an_address(tmp_path):
    with pytest.raises(TraceError, match=r"trace entry 1 \(free_requested\) needs an integer 'addr'"):
        load(tmp_path, [entry("alloc", 0x100, MiB, 6), entry("free_requested", None, MiB, 7)])


def test_requests_round_trip_the_compact_format(tmp_path):
    trace = load(tmp_path, *deferred_job())
    save_trace(trace, tmp_path / "t.xz")
    back = load_trace(tmp_path / "t.xz")
    assert (back.kinds, back.addrs, back.sizes, back.streams) == (trace.kinds, trace.addrs, trace.sizes, trace.streams)
    assert replay(back) == replay(trace)


def test_a_request_of_an_allocation_not_live_cannot_be_saved(tmp_path):
    with pytest.raises(TraceError, match="requests the free of 5, which is not live"):
        save_trace(Trace([ALLOC, FREE, FREE_REQUESTED], [5, 5, 5], [MiB] * 3, [0] * 3), tmp_path / "t.xz")


def test_a_second_request_of_one_block_counts_it_out_once():
    trace = Trace([ALLOC, FREE_REQUESTED, FREE_REQUESTED, ALLOC, FREE], [0, 0, 0, 1, 0], [MiB, MiB, MiB, MiB, MiB],
                  [0] * 5)
    result = replay(trace)
    assert result.peak_allocated_bytes == MiB and result.stats["allocated_bytes.all.current"] == MiB


def test_a_block_waiting_for_its_completion_is_not_reused(tmp_path):
    """Used on another stream (record_stream), freed: the next request cannot have it until its completion."""
    entries = [entry("alloc", 0x100, 64 * MiB, 10), entry("free_requested", 0x100, 64 * MiB, 11),
               entry("alloc", 0x200, 8 * MiB, 12), entry("free_completed", 0x100, 64 * MiB, 13),
               entry("alloc", 0x300, 8 * MiB, 13)]
    result = replay(load(tmp_path, entries))
    assert (result.peak_reserved_bytes, result.num_device_alloc) == (84 * MiB, 2)   # the second 8 MiB reuse it
    assert (result.peak_allocated_bytes, result.stats["active_bytes.all.peak"]) == (64 * MiB, 72 * MiB)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, Trace]:
    """The H100 recordings of examples/graph_buckets.py, one under each setting (tests/fixtures/graphs/README.md)."""
    folder = tmp_path_factory.mktemp("graph-buckets")
    traces = {}
    for name in SETTINGS:
        path = folder / f"{name}.pickle"
        path.write_bytes(lzma.decompress((FIXTURES / f"graph-buckets-{name}.pickle.xz").read_bytes()))
        traces[name] = load_trace(path)
    return traces


@pytest.mark.parametrize("name", SETTINGS)
def test_whole_step_captures_replay_to_the_byte_under_every_setting(recordings, name):
    """A transformer's whole step (capturable AdamW) captured per length bucket into one shared pool, eager steps
    between: the gradients of a bucket's last warm-up step, made on a side stream for AccumulateGrad nodes of the
    capture stream, are freed by zero_grad inside the next capture and complete only after it. Each recording,
    replayed under each setting, gives that setting's measured peaks reserved, allocated and requested to the byte;
    counted out at their completion (alloctune before FREE_REQUESTED), the peak allocated was 3.1-3.2% high."""
    trace = recordings[name]
    assert trace.kinds.count(FREE_REQUESTED) >= 3 * 53   # the 53 gradients, freed in 3 or 4 of the 4 captures
    for measured in (recordings[other].meta["measured"][0] for other in SETTINGS):
        result = simulate(trace, AllocConf.parse(measured["conf"]), trace.meta["device_total_bytes"],
                          overhead_bytes=trace.meta["overhead_bytes"], torch_version=trace.meta["torch_version"])
        assert (result.peak_reserved_bytes, result.peak_allocated_bytes, result.peak_requested_bytes) == \
               (measured["peak_reserved_bytes"], measured["peak_allocated_bytes"], measured["peak_requested_bytes"])
        assert result.stats["active_bytes.all.peak"] > measured["peak_allocated_bytes"] * 1.03
