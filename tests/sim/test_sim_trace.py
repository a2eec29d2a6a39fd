"""Trace loading: PyTorch snapshot pickles (restricted unpickler), the compact format, and awkward traces."""
from __future__ import annotations

import lzma
import os
import pickle

import pytest

from alloctune.errors import TraceError
from alloctune.sim.trace import ALLOC, FREE, FREE_REQUESTED, Trace, alloc_digest, load_trace, save_trace

MiB = 2**20


def entry(action, addr=None, size=0, stream=0, **extra):
    """A trace entry shaped like torch's (torch 2.11 adds more keys; we must ignore what we don't use)."""
    e = {"action": action, "size": size, "stream": stream, "time_us": 0, "frames": [],
         "compile_context": "N/A", "user_metadata": ""}
    if action == "oom":
        e["device_free"] = 1234
    else:
        e["addr"] = addr
    e.update(extra)
    return e


def alloc_free(addr, size, stream=0):
    return [entry("alloc", addr, size, stream), entry("free_requested", addr, size, stream),
            entry("free_completed", addr, size, stream)]


def snapshot(*device_traces, **extra):
    return {"segments": [], "device_traces": list(device_traces),
            "allocator_settings": {"expandable_segments": False}, **extra}


def write_pickle(tmp_path, obj, name="snap.pickle"):
    path = tmp_path / name
    with open(path, "wb") as f:
        pickle.dump(obj, f)
    return path


def test_snapshot_basic_order_and_ids(tmp_path):
    entries = [
        entry("segment_alloc", 0x7000, 20 * MiB),
        entry("alloc", 0x7000, 3 * MiB),
        entry("alloc", 0x7400, 1000),
        entry("free_requested", 0x7000, 3 * MiB),   # not yet returned to the pool: a request of its own
        entry("alloc", 0x9000, 5 * MiB),
        entry("free_completed", 0x7000, 3 * MiB),   # returned here
        entry("alloc", 0x7000, 2 * MiB),            # address reused: a new allocation id
        entry("snapshot", 0, 0),
        entry("free_requested", 0x7000, 2 * MiB),   # completed right after: one FREE does both
        entry("free_completed", 0x7000, 2 * MiB),
    ]
    trace = load_trace(write_pickle(tmp_path, snapshot(entries)))
    assert trace.kinds == [ALLOC, ALLOC, FREE_REQUESTED, ALLOC, FREE, ALLOC, FREE]
    assert trace.addrs == [0, 1, 0, 2, 0, 3, 3]
    assert trace.sizes == [3 * MiB, 1000, 3 * MiB, 5 * MiB, 3 * MiB, 2 * MiB, 2 * MiB]
    assert trace.streams == [0] * 7
    assert trace.device == 0 and trace.num_allocs == 4 and len(trace) == 7
    assert trace.meta["allocator_settings"] == {"expandable_segments": False}
    assert trace.meta["live_at_end"] == 2 and trace.meta["dropped_frees"] == 0
    assert trace.warnings == []


def test_hostile_pickle_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = write_pickle(tmp_path, {"device_traces": [[entry("alloc", 1, 10)]], "x": Evil()})
    with pytest.raises(TraceError, match="refused.*system"):
        load_trace(path)
    assert not marker.exists()
    # The same pickle really is hostile: an ordinary load runs it.
    with open(path, "rb") as f:
        pickle.load(f)
    assert marker.exists()


def test_pickle_with_any_class_is_refused(tmp_path):
    import collections
    path = write_pickle(tmp_path, snapshot([entry("alloc", 1, 10)], extra=collections.OrderedDict(a=1)))
    with pytest.raises(TraceError, match="refused.*OrderedDict"):
        load_trace(path)


def test_truncated_and_corrupt_files(tmp_path):
    good = pickle.dumps(snapshot(alloc_free(0x10, 4096) * 50))
    (tmp_path / "trunc.pickle").write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceError, match="truncated or corrupt"):
        load_trace(tmp_path / "trunc.pickle")
    (tmp_path / "junk.bin").write_bytes(b"hello world")
    with pytest.raises(TraceError, match="neither"):
        load_trace(tmp_path / "junk.bin")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(TraceError, match="neither"):
        load_trace(tmp_path / "empty")
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "missing.pickle")
    with pytest.raises(TraceError, match="not a PyTorch memory snapshot"):
        load_trace(write_pickle(tmp_path, [1, 2, 3], "list.pickle"))
    with pytest.raises(TraceError, match=r"entry 1 \(alloc\) needs"):
        load_trace(write_pickle(tmp_path, snapshot([entry("alloc", 1, 10), {"action": "alloc", "size": 5}]),
                                "noaddr.pickle"))
    with pytest.raises(TraceError, match="still in use"):
        load_trace(write_pickle(tmp_path, snapshot([entry("alloc", 1, 10), entry("alloc", 1, 10)]), "dup.pickle"))


def test_no_allocations(tmp_path):
    with pytest.raises(TraceError, match="no allocations on any device.*_record_memory_history"):
        load_trace(write_pickle(tmp_path, snapshot([], [entry("segment_alloc", 1, 2 * MiB)])))
    # Only frees of blocks from before the recording: nothing to replay.
    with pytest.raises(TraceError, match="no allocations on any device"):
        load_trace(write_pickle(tmp_path, snapshot([entry("free_completed", 5, 10)]), "x.pickle"))


def test_frees_of_unknown_blocks_are_dropped_and_counted(tmp_path):
    entries = [entry("free_completed", 0x500, 7 * MiB), entry("free_completed", 0x600, 1 * MiB)] + alloc_free(0x10, 100)
    trace = load_trace(write_pickle(tmp_path, snapshot(entries)))
    assert trace.kinds == [ALLOC, FREE]
    assert trace.meta["dropped_frees"] == 2 and trace.meta["dropped_free_bytes"] == 8 * MiB
    assert any("before the recording started" in w for w in trace.warnings)


def test_several_streams_and_private_pools_are_kept_apart(tmp_path):
    entries = [entry("alloc", 1, 100, stream=0), entry("alloc", 2, 100, stream=0xABC),
               entry("alloc", 3, 100, stream=0, pool_id=(1, 0)), entry("alloc", 4, 100, stream=0xABC),
               entry("free_completed", 2, 100, stream=0xABC)]
    trace = load_trace(write_pickle(tmp_path, snapshot(entries)))
    allocs = [stream for kind, stream in zip(trace.kinds, trace.streams) if kind in (ALLOC, FREE)]
    assert allocs == [0, 1, 2, 1, 1]   # the pool's stream index is put in its pool first (tests/sim/test_captures.py)
    assert trace.meta["streams"] == [[0, 0, 0], [0xABC, 0, 0], [0, 1, 0]]


def test_several_devices(tmp_path):
    dev0, dev1 = alloc_free(1, 100), alloc_free(2, 200) + alloc_free(3, 300)
    path = write_pickle(tmp_path, snapshot(dev0, dev1))
    with pytest.raises(TraceError, match=r"devices \[0, 1\]: choose one"):
        load_trace(path)
    trace = load_trace(path, device=1)
    assert trace.device == 1 and trace.sizes == [200, 200, 300, 300]
    with pytest.raises(TraceError, match="no allocations on device 2"):
        load_trace(path, device=2)
    # Only one device has allocations: it is taken without asking.
    only = load_trace(write_pickle(tmp_path, snapshot([], dev1, []), "one.pickle"))
    assert only.device == 1


def test_oom_entries_and_order_dependence_warning(tmp_path):
    # OOM as the last event (the program died): counted, and the failed request replayed last, which it says.
    ended = load_trace(write_pickle(tmp_path, snapshot([entry("alloc", 1, 100), entry("oom", size=10**12)])))
    assert ended.meta["recorded_ooms"] == 1 and len(ended.warnings) == 1 and "replayed last" in ended.warnings[0]
    assert ended.kinds == [ALLOC, ALLOC] and ended.sizes == [100, 10**12]
    assert ended.meta["failed_request_bytes"] == 10**12
    # OOM caught and the program went on allocating: what it asks depends on free memory.
    went_on = load_trace(write_pickle(tmp_path, snapshot([entry("alloc", 1, 100), entry("oom", size=10**12),
                                                          entry("alloc", 2, 10**6)]), "b.pickle"))
    assert went_on.kinds == [ALLOC, ALLOC] and went_on.meta["failed_request_bytes"] == 0
    assert any("allocation-order dependent" in w for w in went_on.warnings)


def test_meta_from_record_and_digest_mismatch(tmp_path):
    entries = alloc_free(1, 100) + alloc_free(2, 300)
    trace = load_trace(write_pickle(tmp_path, snapshot(entries)))
    digest = alloc_digest(trace)
    same = {"torch_version": "2.11.0+cu130", "measured": [{"conf": "", "alloc_digest": digest}]}
    loaded = load_trace(write_pickle(tmp_path, snapshot(entries, alloctune=same), "same.pickle"))
    assert loaded.meta["torch_version"] == "2.11.0+cu130" and loaded.warnings == []
    other = {"measured": [{"conf": "", "alloc_digest": digest},
                          {"conf": "expandable_segments:True", "alloc_digest": "0" * 16}]}
    loaded = load_trace(write_pickle(tmp_path, snapshot(entries, alloctune=other), "other.pickle"))
    assert any("measured under other settings" in w for w in loaded.warnings)
    with pytest.raises(TraceError, match="'alloctune' must hold a dict"):
        load_trace(write_pickle(tmp_path, snapshot(entries, alloctune=[1]), "bad.pickle"))


def test_compact_round_trip(tmp_path):
    entries = [entry("alloc", 0x100, 3 * MiB), entry("alloc", 0x200, 512, stream=7),
               entry("free_completed", 0x100, 3 * MiB), entry("alloc", 0x100, 2**40),
               entry("free_completed", 0x200, 512, stream=7)]
    meta = {"torch_version": "2.11.0", "overhead_bytes": 500 * MiB, "device_total_bytes": 143771 * MiB,
            "measured": [{"conf": "", "peak_reserved_bytes": 20 * MiB, "peak_allocated_bytes": 4 * MiB}]}
    trace = load_trace(write_pickle(tmp_path, snapshot([], entries, alloctune=meta)))
    save_trace(trace, tmp_path / "t.atrace")
    back = load_trace(tmp_path / "t.atrace")
    assert (back.kinds, back.addrs, back.sizes, back.streams, back.device) == \
           (trace.kinds, trace.addrs, trace.sizes, trace.streams, 1)
    assert back.meta == trace.meta
    with pytest.raises(TraceError, match="device 1 only"):
        load_trace(tmp_path / "t.atrace", device=0)


def test_compact_accepts_raw_addresses_and_refuses_bad_traces(tmp_path):
    # Any addresses unique while live work; they are renumbered to allocation ids.
    raw = Trace([ALLOC, ALLOC, FREE, ALLOC, FREE, FREE], [900, 50, 900, 900, 50, 900], [1, 2, 1, 3, 2, 3],
                [0, 0, 0, 1, 0, 1])
    save_trace(raw, tmp_path / "raw.atrace")
    back = load_trace(tmp_path / "raw.atrace")
    assert back.addrs == [0, 1, 0, 2, 1, 2] and back.sizes == raw.sizes and back.streams == raw.streams
    with pytest.raises(TraceError, match="not live"):
        save_trace(Trace([ALLOC, FREE, FREE], [1, 1, 1], [5, 5, 5], [0, 0, 0]), tmp_path / "x.atrace")
    with pytest.raises(TraceError, match="same length"):
        save_trace(Trace([ALLOC], [1, 2], [5], [0]), tmp_path / "x.atrace")
    with pytest.raises(TraceError, match="JSON"):
        save_trace(Trace([ALLOC], [1], [5], [0], meta={"x": object()}), tmp_path / "x.atrace")
    assert not (tmp_path / "x.atrace").exists()


def test_compact_large_is_small_and_exact(tmp_path):
    import random
    rng = random.Random(0)
    kinds, addrs, sizes, streams, live, next_addr = [], [], [], [], [], 0
    for _ in range(200_000):
        if live and rng.random() < 0.5:
            addr, size = live.pop(rng.randrange(len(live)) if rng.random() < 0.2 else -1)
            kinds.append(FREE)
        else:
            addr, size = next_addr, rng.choice([512, 4096, 2 * MiB, 48 * MiB]) * rng.randint(1, 8)
            next_addr += 1
            live.append((addr, size))
            kinds.append(ALLOC)
        addrs.append(addr), sizes.append(size), streams.append(0)
    trace = Trace(kinds, addrs, sizes, streams)
    save_trace(trace, tmp_path / "big.atrace")
    assert os.path.getsize(tmp_path / "big.atrace") < 200_000 * 2  # well under 2 bytes per event
    back = load_trace(tmp_path / "big.atrace")
    assert back.kinds == kinds and back.sizes == sizes


def test_compact_truncated_corrupt_and_unknown_version(tmp_path):
    trace = Trace([ALLOC, FREE], [0, 0], [100, 100], [0, 0])
    save_trace(trace, tmp_path / "t.atrace")
    data = (tmp_path / "t.atrace").read_bytes()
    (tmp_path / "trunc.atrace").write_bytes(data[:-10])
    with pytest.raises(TraceError, match="truncated or corrupt"):
        load_trace(tmp_path / "trunc.atrace")

    def write(name, payload: bytes):
        (tmp_path / name).write_bytes(lzma.compress(payload))
        return tmp_path / name

    with pytest.raises(TraceError, match="version 99"):
        load_trace(write("v99", b'{"format": "alloctune-trace", "version": 99}\n'))
    with pytest.raises(TraceError, match="not an alloctune trace"):
        load_trace(write("other", b'{"format": "something"}\n'))
    header = (b'{"format": "alloctune-trace", "version": 1, "device": 0, "meta": {}, "arrays": '
              b'{"kinds": ["|u1", 2], "sizes": ["<i8", 1], "streams": ["<i8", 1], "frees": ["<i8", 1]}}\n')
    with pytest.raises(TraceError, match="runs past the end"):
        load_trace(write("short", header + b"\x00\x01"))
    body = bytes([0, 1]) + (100).to_bytes(8, "little") + bytes(8) + (5).to_bytes(8, "little")  # frees 5 back
    with pytest.raises(TraceError, match="does not exist or was already freed"):
        load_trace(write("badfree", header + body))
