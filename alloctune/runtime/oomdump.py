"""`dump_on_oom(folder)`: leave a memory snapshot behind at the next CUDA out-of-memory error, one file per rank.

Users add one line to their training script; when the allocator runs out, `alloctune diagnose FILE` reads what
it left. It installs two things (torch >= 2.1):

- `torch.cuda.memory._record_memory_history(context=None, max_entries=N)`: a ring buffer of the last N
  allocator events, without stack frames (small files, little overhead);
- an OOM observer (`torch._C._cuda_attach_out_of_memory_observer`). The allocator calls it when it is about
  to raise, after it has released what it could, with (device, requested bytes, the limit: the allowed
  memory when a memory fraction is set, else the device's total, free bytes on the device). The observer
  writes `torch.cuda.memory._snapshot()` plus an `alloctune` dict with those numbers to
  `FOLDER/oom-rank{R}.pickle` (R from RANK, else LOCAL_RANK, else 0). A later OOM in the same process
  overwrites it: the file describes the latest one.

The exception's text is not passed to the observer. `sys.excepthook` is chained so that an OOM nobody catches
also writes its message to `FOLDER/oom-rank{R}.txt`; a program that catches the error can call
`save_oom_message(exc)` itself. `diagnose` reads the text file beside the snapshot when it is there.

Everything written is plain data (dicts, lists, strings, numbers): the loader that reads it admits nothing else.
This module imports only the standard library and torch (and `oom.py`, the OOM rule, `process.py`, the rank,
`files.write_file`, whole-file writes, and `errors.py`: standard library too): it runs inside the user's job.
"""
from __future__ import annotations

import os
import pickle
import shlex
import sys
from types import TracebackType

from ..errors import AlloctuneError, shown
from ..files import write_file
from .oom import is_oom
from .process import rank

DEFAULT_MAX_ENTRIES = 100_000  # ~12 MB of pickle: ~120 bytes an event with context=None (torch 2.11)

_state: dict = {}


def dump_on_oom(folder: str | os.PathLike, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> str | None:
    """Record allocator events and dump a snapshot into `folder` at the next OOM; returns the snapshot path. Where
    torch sees no CUDA device (a CPU build, a machine without a GPU) there is nothing to record: one line on
    standard error says so and it returns None, so the same script runs there unchanged."""
    if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder) or "\0" in str(os.fspath(folder)):
        raise AlloctuneError(f"dump_on_oom: folder must be a path, got {shown(folder)}")
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
        raise AlloctuneError(f"dump_on_oom: max_entries must be an integer of at least 1, got {shown(max_entries)}")
    import torch

    if not torch.cuda.is_available():
        print("alloctune: dump_on_oom: torch sees no CUDA device here: no out-of-memory snapshot will be written",
              file=sys.stderr)
        return None
    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(os.fspath(folder), f"oom-rank{rank() or 0}")
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=max_entries)
    if not _state:  # attach once: a second call only moves the files
        torch._C._cuda_attach_out_of_memory_observer(_observer)
        _state["previous_hook"] = sys.excepthook
        sys.excepthook = _excepthook
    _state.update(stem=stem, max_entries=max_entries)
    return stem + ".pickle"


def save_oom_message(exc: BaseException) -> str | None:
    """Write `str(exc)` beside the snapshot (for a program that catches the OOM itself); returns the path."""
    if "stem" not in _state:
        return None
    path = _state["stem"] + ".txt"
    write_file(path, str(exc).encode())
    return path


def _observer(device: int, requested: int, limit: int, device_free: int) -> None:
    import torch

    try:
        snapshot = torch.cuda.memory._snapshot()
        props = torch.cuda.get_device_properties(device)
        # The allocator passes the allowed memory when a fraction is in force, else cudaMemGetInfo's total.
        get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        fraction_set = (get_fraction(device) < 1 if get_fraction is not None
                        else limit != torch.cuda.mem_get_info(device)[1])
        snapshot["alloctune"] = {
            "torch_version": str(torch.__version__),  # a TorchVersion: a class, which the safe loader refuses
            "device_total_bytes": int(props.total_memory),
            "max_entries": _state["max_entries"],
            "oom": {"device": int(device), "requested_bytes": int(requested), "device_free_bytes": int(device_free),
                    "allowed_bytes": int(limit) if fraction_set else None, "limit_bytes": int(limit),
                    "rank": rank() or 0, "pid": os.getpid(),
                    "memory_stats": {k: int(v) for k, v in torch.cuda.memory_stats(device).items()
                                     if isinstance(v, (int, float))}},
        }
        write_file(_state["stem"] + ".pickle", pickle.dumps(snapshot, protocol=4))
        print(f"alloctune: out of memory on GPU {device}: snapshot written to {_state['stem']}.pickle "
              f"(read it with: alloctune diagnose {shlex.quote(_state['stem'] + '.pickle')})", file=sys.stderr)
    except Exception as exc:  # an observer must never turn the OOM into another error
        print(f"alloctune: could not write the OOM snapshot: {type(exc).__name__}: {exc}", file=sys.stderr)


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if is_oom(value):
        save_oom_message(value)
    _state["previous_hook"](kind, value, tb)
