"""Traces built to hurt the loader (issue 19): each is refused in one line with exit 2, or read, within bounded
time and memory, by every command that loads a trace; nothing is left behind."""
from __future__ import annotations

import json
import lzma
import os
import pickle
import threading

import numpy as np
import pytest
from bounded import MiB, bounded_cli, one_line_error

from alloctune.sim.limits import MAX_EVENTS
from alloctune.sim.trace import Trace, save_trace

PACKED = "workloads/transformer-packed.yaml"
SECONDS = 30   # what a refusal may take (a sweep probes its interpreter first: twice that); loading these whole
               # takes minutes, and more memory than bounded_cli allows


def header(kinds: int, sizes: int, frees: int, meta: dict | None = None) -> bytes:
    return json.dumps({"format": "alloctune-trace", "version": 1, "device": 0, "meta": meta or {},
                       "arrays": {"kinds": ["|u1", kinds], "sizes": ["<i8", sizes], "streams": ["<i8", sizes],
                                  "frees": ["<i8", frees]}}).encode() + b"\n"


def shuffled(a: np.ndarray) -> bytes:
    return a.view(np.uint8).reshape(-1, a.itemsize).T.tobytes()


def allocations(sizes: list[int], meta: dict | None = None) -> bytes:
    """A compact trace of allocations only (never freed), as save_trace lays it out."""
    n = len(sizes)
    return lzma.compress(header(n, n, 0, meta) + shuffled(np.zeros(n, np.uint8)) + shuffled(np.array(sizes, "<i8"))
                         + shuffled(np.zeros(n, "<i8")))


def refused_everywhere(path, tmp_path, *, sweep: bool = True) -> list[str]:
    """The one-line error of replay, search and sweep --trace on `path`, each within SECONDS and bounded_cli's
    memory; the sweep leaves no results folder, and refuses the trace before it starts an interpreter (the one it
    names does not exist)."""
    runs = [bounded_cli("replay", path, timeout=SECONDS), bounded_cli("search", path, timeout=SECONDS)]
    if sweep:
        out = tmp_path / "results-folder"
        runs.append(bounded_cli("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--trace", path, "--out",
                                out, "--conf", "expandable_segments:True", "--python", tmp_path / "no-python",
                                timeout=2 * SECONDS))
        assert not out.exists()
    return [one_line_error(run) for run in runs]


def test_a_header_announcing_gigabytes_is_refused_before_anything_is_inflated(tmp_path):
    n = 8 * 2**30 // 17   # 8 GiB of arrays, as many events as that holds
    path = tmp_path / "bomb.xz"
    path.write_bytes(lzma.compress(header(n, n, 0) + bytes(64 * MiB), preset=0))   # the fastest to make
    assert path.stat().st_size < 100_000
    for error in refused_everywhere(path, tmp_path):
        assert f"the header announces arrays of {n:,} events, more than the {MAX_EVENTS:,}" in error


def test_sixty_million_zero_size_allocations_are_refused_from_the_header(tmp_path):
    """The declaration alone decides: the arrays after it are never inflated (here they are not even there)."""
    path = tmp_path / "zeros.xz"
    path.write_bytes(lzma.compress(header(60_000_000, 60_000_000, 0)))
    for error in refused_everywhere(path, tmp_path):
        assert "the header announces arrays of 60,000,000 events" in error


def test_arrays_that_inflate_beyond_their_declaration_stop_at_it(tmp_path):
    path = tmp_path / "more.xz"
    path.write_bytes(lzma.compress(header(1000, 1000, 0) + bytes(256 * MiB), preset=0))
    for error in refused_everywhere(path, tmp_path, sweep=False):
        assert "inflates to more than the 16.60 KiB its header announces" in error


def test_a_negative_allocation_size_is_refused_before_any_replay(tmp_path):
    path = tmp_path / "negative.xz"
    path.write_bytes(allocations([-512, 1024]))
    for error in refused_everywhere(path, tmp_path):
        assert "'negative.xz' is corrupt: an allocation of a negative size (-512 bytes)" in error.replace(
            str(tmp_path) + os.sep, "")


def test_a_measured_setting_that_is_not_a_string_is_named(tmp_path):
    path = tmp_path / "measured.xz"
    path.write_bytes(allocations([512, 1024], {"measured": [{"conf": 5, "peak_reserved_bytes": 2 * MiB}]}))
    for error in refused_everywhere(path, tmp_path):
        assert "meta 'measured[0]': field 'conf': expected a string, got 5" in error


def entry(addr, size, **extra) -> dict:
    return {"action": "alloc", "addr": addr, "size": size, "stream": 0, **extra}


def snapshot_with(bad: dict) -> dict:
    return {"segments": [], "device_traces": [[entry(1, 512), bad]]}


def test_a_bad_entry_holding_a_tree_of_shared_references_is_shown_briefly(tmp_path):
    """2**60 paths through 60 shared nodes: a plain repr of the entry would never end."""
    node: list = []
    for _ in range(60):
        node = [node, node]
    path = tmp_path / "tree.pickle"
    path.write_bytes(pickle.dumps(snapshot_with(entry(2, "x", frames=node))))
    assert path.stat().st_size < 1000
    for error in refused_everywhere(path, tmp_path):
        assert "trace entry 1 (alloc) needs an integer 'size'" in error and len(error) < 600


def deep_pickle(snapshot: dict, depth: int = 200_000) -> bytes:
    """`snapshot` pickled with its string "DEEP" replaced by a list nested `depth` deep (pickle itself recurses
    too deep to write one): EMPTY_LIST `depth` times, then APPEND `depth - 1` times."""
    data = pickle.dumps(snapshot, protocol=4)
    marker = b"\x8c\x04DEEP"   # SHORT_BINUNICODE "DEEP"
    assert data.count(marker) == 1
    return data.replace(marker, b"]" * depth + b"a" * (depth - 1))


def test_a_list_nested_200000_deep_is_read_past_or_refused_in_one_line(tmp_path):
    ignored = tmp_path / "frames.pickle"   # where the loader does not look: read as if it were not there
    ignored.write_bytes(deep_pickle(snapshot_with(entry(2, 1024, frames="DEEP"))))
    run = bounded_cli("replay", ignored, "--conf", "expandable_segments:True", timeout=SECONDS)
    assert run.returncode == 0 and "expandable_segments:True" in run.stdout, run.stderr
    for name, bad in [("size.pickle", entry(2, "x", frames="DEEP")), ("stream.pickle", entry(2, 1024, stream="DEEP"))]:
        (tmp_path / name).write_bytes(deep_pickle(snapshot_with(bad)))
        for error in refused_everywhere(tmp_path / name, tmp_path, sweep=False):
            assert "trace entry 1 (alloc) needs an integer" in error and len(error) < 600
    meta = tmp_path / "meta.pickle"
    meta.write_bytes(deep_pickle({**snapshot_with(entry(2, 1024)), "alloctune": {"env": {"a": "DEEP"}}}))
    for error in refused_everywhere(meta, tmp_path, sweep=False):
        assert "nested more than 64 levels deep" in error


@pytest.mark.parametrize("source", ["/dev/zero", "/dev/urandom", "sparse", "stdin"])
def test_endless_devices_and_huge_files_cost_no_more_than_their_limit(tmp_path, source):
    path = source
    if source == "sparse":   # a 3 GB file, in no disk space
        path = tmp_path / "huge.pickle"
        with open(path, "wb") as f:
            f.write(b"\x80")
            f.truncate(3 * 2**30)
    runs = []
    for command in ("replay", "search", "diagnose"):
        if source == "stdin":
            with open("/dev/zero", "rb") as zero:
                runs.append(bounded_cli(command, "-", stdin=zero, timeout=SECONDS))
        else:
            runs.append(bounded_cli(command, path, timeout=SECONDS))
    for run in runs:
        error = one_line_error(run)
        if source == "sparse":
            assert "is larger than the 2.00 GiB alloctune reads as" in error


def test_a_trace_from_a_fifo_is_read_as_it_comes(tmp_path):
    """A named pipe is streamed like standard input (without a writer it waits, as any reader of a pipe does)."""
    trace = tmp_path / "t.xz"
    save_trace(Trace([0, 0, 1], [0, 1, 0], [MiB, 3 * MiB, MiB], [0, 0, 0]), trace)
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(trace.read_bytes()))
    writer.start()
    run = bounded_cli("replay", fifo, "--conf", "expandable_segments:True", "--json", timeout=SECONDS)
    writer.join()
    assert run.returncode == 0, run.stderr
    assert {row["conf"] for row in json.loads(run.stdout)["results"]} == {"default", "expandable_segments:True"}
