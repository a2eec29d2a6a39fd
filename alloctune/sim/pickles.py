"""PyTorch memory snapshot pickles, read as a stream without running anything they hold.

A pickle runs code when loaded, so a snapshot is read with an unpickler that admits no global at all: only dicts,
lists, tuples, strings, numbers, booleans and None get through, and anything else is refused with `TraceError`
before it can run. `trace.py` turns a snapshot's entries into a `Trace`; `diagnosis/` reads its segments.
"""
from __future__ import annotations

import io
import pickle

from ..errors import AlloctuneError, TraceError, shown
from .limits import MIN_ITEM_BYTES

PICKLE_PROTO = 0x80  # every pickle protocol >= 2 starts with PROTO; torch writes protocol >= 2


class _PlainUnpickler(pickle.Unpickler):
    """Admits no global but one: with no class or function to name, a pickle can build only plain containers
    and scalars, and REDUCE/BUILD have nothing to call. The exception is torch's `TorchVersion`, a str subclass
    that scripts put in snapshot metadata as `torch.__version__`: it is read as a plain str (whose construction
    runs nothing)."""

    def find_class(self, module, name):
        if (module, name) == ("torch.torch_version", "TorchVersion"):
            return str
        raise TraceError(f"refused: the pickle asks for {module}.{name}; a memory snapshot holds only plain "
                         f"containers and scalars, so nothing in this file was run")


def unpickle_snapshot(head: bytes, stream: io.BufferedIOBase, where: str) -> dict:
    """The snapshot whose pickle starts with `head` (already read, to tell the format) and goes on in `stream`."""
    raw = _Rejoined(head, stream)
    try:
        snapshot = _PlainUnpickler(io.BufferedReader(raw)).load()
    except AlloctuneError:  # refused: a global asked for, or the input passed its size limit
        raise
    except Exception as exc:  # the unpickler raises many types on corrupt input; all mean the same here
        raise TraceError(f"{where!r} is truncated or corrupt ({type(exc).__name__}: {shown(str(exc))})") from None
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("device_traces"), list):
        raise TraceError(f"{where!r} is not a PyTorch memory snapshot: expected a dict with 'device_traces' "
                         f"(written by torch.cuda.memory._dump_snapshot)")
    _within_its_size(snapshot, raw.read_bytes, where)
    return snapshot


def _within_its_size(snapshot: dict, size: int, where: str) -> None:
    """Refuse a snapshot that lists more segments, blocks and trace entries than one per MIN_ITEM_BYTES of its
    `size`, counting no further than that."""
    most = size // MIN_ITEM_BYTES
    lists = [snapshot["device_traces"], *snapshot["device_traces"][:most]]
    segments = snapshot.get("segments")
    if isinstance(segments, list):
        lists += [segments, *(s.get("blocks") for s in segments[:most] if isinstance(s, dict))]
    listed = 0
    for items in lists:
        listed += len(items) if isinstance(items, list) else 0
        if listed > most:
            raise TraceError(f"{where!r} lists more segments, blocks and trace entries than one for every "
                             f"{MIN_ITEM_BYTES} of its {size:,} bytes, which no snapshot torch writes does: it "
                             f"repeats some by reference")


class _Rejoined(io.RawIOBase):
    """`head` followed by the rest of `stream`: what the unpickler reads."""

    def __init__(self, head: bytes, stream: io.BufferedIOBase):
        self._head, self._stream = head, stream
        self.read_bytes = 0   # handed to the unpickler so far

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
        else:
            n = self._stream.readinto(buffer)
        self.read_bytes += n
        return n
