"""The bytes of alloctune's compact trace format (`trace.save_trace` and `trace.load_trace` put a `Trace` in and
out of it): an xz stream holding one JSON header line (format name, version, device, meta, array layout) followed by
little-endian arrays, each byte-shuffled (all low bytes, then the next...), which lets xz shrink the int64 arrays
several times further. Reading is a stream inflated in bounded pieces: the header's layout is checked against
MAX_EVENTS before anything else is inflated, and an xz bomb is refused when it passes the size its header
announces, not after it has filled memory.
"""
from __future__ import annotations

import io
import json
import lzma
import os

import numpy as np

from ..errors import TraceError, shown
from ..files import write_file
from ..results.typed import MAX_PLAIN_VALUES
from ..units import format_bytes
from .limits import MAX_EVENTS

FORMAT = "alloctune-trace"
# 2: empty_cache events (kind 2); 3: CUDA graphs' pool events (kinds 3-6, the arrays `pools`, `pool_streams`); 4: free
# requests (kind 7, the array `requests`). An alloctune that reads an older version could not replay them; older
# files read as they were.
FORMAT_VERSION = 4
READ_VERSIONS = (1, 2, 3, 4)
XZ_MAGIC = b"\xfd7zXZ\x00"
MAX_HEADER_BYTES = 64 * 2**20
# in file order; `pools`: each pool event's pool number, `pool_streams`: each POOL_STREAM's stream index,
# `requests`: each free request's allocation, counted back as `frees` count theirs
ARRAYS = {"kinds": "|u1", "sizes": "<i8", "streams": "<i8", "frees": "<i8", "pools": "<i8", "pool_streams": "<i8",
          "requests": "<i8"}
_SINCE = {"pools": 3, "pool_streams": 3, "requests": 4}   # arrays a file of an older version lacks (read as empty)
_CHUNK = 1 << 20


def write_compact(path: str | os.PathLike, device: int, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` (ARRAYS' names, in its order) with the header, whole or not at all (files.write_file)."""
    header = {"format": FORMAT, "version": FORMAT_VERSION, "device": device, "meta": meta,
              "arrays": {name: [a.dtype.str, int(a.size)] for name, a in arrays.items()}}
    try:
        head = json.dumps(header, sort_keys=True).encode()
    except TypeError as exc:
        raise TraceError(f"trace meta must hold only JSON values: {exc}") from None
    body = b"".join(_shuffle(a) for a in arrays.values())
    write_file(path, lzma.compress(head + b"\n" + body, preset=6))


def read_compact(head: bytes, compressed: io.BufferedIOBase, where: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and the arrays of the compact trace whose xz stream starts with `head` (already read, to tell
    the format) and goes on in `compressed`; `TraceError` when it is not one, or is truncated or corrupt. The
    header's device and meta are the caller's to check."""
    stream = _Inflater(head, compressed, where)
    line = stream.read_line(MAX_HEADER_BYTES)
    # as many values as separators and containers at most: counted before any is made (`[],` x 21 M take 1.5 GB)
    if line.count(b",") + line.count(b"[") + line.count(b"{") > MAX_PLAIN_VALUES:
        raise TraceError(f"{where!r}: its header holds more than the {MAX_PLAIN_VALUES:,} values a trace's metadata "
                         f"may: not an alloctune trace")
    try:
        header = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{where!r} is truncated or corrupt ({shown(str(exc))})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TraceError(f"{where!r} is an xz file but not an alloctune trace (no '{FORMAT}' header)")
    if header.get("version") not in READ_VERSIONS:
        raise TraceError(f"{where!r} is alloctune trace format version {shown(header.get('version'))}; this "
                         f"alloctune reads versions {', '.join(map(str, READ_VERSIONS))} only")
    try:
        layout = _layout(header)
        if not all(dtype == ARRAYS[name] and isinstance(n, int) and not isinstance(n, bool) and n >= 0
                   for name, dtype, n in layout):
            raise ValueError(f"array layout {shown(header['arrays'], 200)} is not {ARRAYS}")
        counts = {name: n for name, _, n in layout}
        if (longest := max(counts.values())) > MAX_EVENTS:   # said from the header, before anything is inflated
            raise TraceError(f"{where!r}: the header announces arrays of {longest:,} events, more than the "
                             f"{MAX_EVENTS:,} alloctune replays")
        if counts["sizes"] != counts["streams"] or counts["pool_streams"] > counts["pools"] \
                or counts["sizes"] + counts["frees"] + counts["pools"] + counts["requests"] > counts["kinds"]:
            raise ValueError(f"array layout {shown(header['arrays'], 200)}: the lengths do not agree")
        body = stream.read_rest(sum(np.dtype(dtype).itemsize * n for _, dtype, n in layout))
        arrays, offset = {}, 0
        for name, dtype, n in layout:
            length = np.dtype(dtype).itemsize * n
            if offset + length > len(body):
                raise ValueError(f"array {name!r} runs past the end of the data")
            arrays[name] = _unshuffle(body[offset:offset + length], dtype, n)
            offset += length
        if offset != len(body):
            raise ValueError(f"{len(body) - offset} bytes left over after the arrays")
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"{where!r} is corrupt: {exc}") from None
    return header, arrays


def _layout(header: dict) -> list[tuple]:
    """(name, dtype, length) of each array the header announces; those its version predates are empty."""
    arrays, version = header["arrays"], header["version"]
    return [(name, *(arrays[name] if name in arrays or version >= _SINCE.get(name, 0) else (ARRAYS[name], 0)))
            for name in ARRAYS]


class _Inflater:
    """Stream-decompresses xz in bounded pieces, so a bomb is refused when it passes a limit, not after it has
    filled memory."""

    def __init__(self, head: bytes, compressed: io.BufferedIOBase, where: str):
        self._xz = lzma.LZMADecompressor()
        self._pending, self._compressed = head, compressed
        self._buffer = bytearray()
        self._where = where

    def _more(self) -> bool:
        if self._xz.eof:
            return False
        if self._xz.needs_input and not self._pending:
            self._pending = self._compressed.read(_CHUNK)
            if not self._pending:
                raise TraceError(f"{self._where!r} is truncated or corrupt (the xz stream ends early)")
        try:
            self._buffer += self._xz.decompress(self._pending, _CHUNK)
        except lzma.LZMAError as exc:
            raise TraceError(f"{self._where!r} is truncated or corrupt ({exc})") from None
        self._pending = b""
        return True

    def read_line(self, limit: int) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > limit:
                raise TraceError(f"{self._where!r}: header longer than {format_bytes(limit)}: not an alloctune trace")
            if not self._more():
                raise TraceError(f"{self._where!r} is an xz file but not an alloctune trace (no header line)")
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        return line

    def read_rest(self, expected: int) -> bytes:
        """Everything after the header, which must be exactly `expected` bytes (the header's array layout)."""
        while self._more():
            if len(self._buffer) > expected:
                raise TraceError(f"{self._where!r} is corrupt: it inflates to more than the "
                                 f"{format_bytes(expected)} its header announces")
        return bytes(self._buffer)


def _shuffle(a: np.ndarray) -> bytes:
    return a.view(np.uint8).reshape(-1, a.itemsize).T.tobytes()


def _unshuffle(raw: bytes, dtype: str, n: int) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(raw, np.uint8).reshape(itemsize, n).T.copy().view(dtype).reshape(n)
