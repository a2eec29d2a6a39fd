"""PyTorch memory snapshot pickles, read without running anything they hold.

A pickle runs code when loaded, so a snapshot is read with an unpickler that admits no global at all: only dicts,
lists, tuples, strings, numbers, booleans and None get through, and anything else is refused with `TraceError`
before it can run. `trace.py` turns a snapshot's entries into a `Trace`; `diagnosis/` reads its segments.
"""
from __future__ import annotations

import io
import os
import pickle

from ..errors import TraceError

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


def read_snapshot(path: str | os.PathLike) -> dict:
    """The plain dict inside a PyTorch snapshot pickle (segments, device_traces, ...), read without running
    anything; `TraceError` for anything else."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TraceError(f"cannot read snapshot {where!r}: {exc.strerror or exc}") from None
    if data[:1] != bytes([PICKLE_PROTO]):
        raise TraceError(f"{where!r} is not a PyTorch memory snapshot (pickle): it starts with {data[:8]!r}")
    return unpickle_snapshot(data, where)


def unpickle_snapshot(data: bytes, where: str) -> dict:
    """The snapshot dict in `data` (a pickle read from `where`), or `TraceError`."""
    try:
        snapshot = _PlainUnpickler(io.BytesIO(data)).load()
    except TraceError:
        raise
    except Exception as exc:  # the unpickler raises many types on corrupt input; all mean the same here
        raise TraceError(f"{where!r} is truncated or corrupt ({type(exc).__name__}: {exc})") from None
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("device_traces"), list):
        raise TraceError(f"{where!r} is not a PyTorch memory snapshot: expected a dict with 'device_traces' "
                         f"(written by torch.cuda.memory._dump_snapshot)")
    return snapshot
