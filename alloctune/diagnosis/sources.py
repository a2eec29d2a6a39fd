"""What diagnose reads: each source given (a message, a log of any size read from its end, a memory snapshot
pickle, a results folder's last OOM trial) and the message dump_on_oom saved beside its snapshot."""
from __future__ import annotations

import codecs
import glob
import io
import os
import shlex

from ..errors import DiagnoseError, shown
from ..files import open_input
from ..settings.conf import conf_label
from ..settings.known import Feature
from ..units import format_bytes
from .message import OomMessage, driver_error, excerpt, looks_like_message, parse_messages


def read_sources(names: list[str]) -> tuple[list[OomMessage], dict | None, str, frozenset[Feature] | None]:
    """The messages (every OOM of one message source, or of what dump_on_oom saved beside its snapshot), the
    snapshot and its name, what the job did where a trial's record says; `names` gains the file read beside the
    snapshot."""
    messages: list[OomMessage] | None = None
    snapshot: dict | None = None
    where, beside, features = "", None, None
    for name in list(names):
        value, path, features = _read(name)
        if isinstance(value, dict):
            if snapshot is not None:
                raise DiagnoseError(f"{name}: one snapshot at a time (got a second one)")
            snapshot, where = value, name
            beside = os.path.splitext(path)[0] + ".txt" if path else None
        elif messages is not None:
            raise DiagnoseError(f"{name}: one message at a time (got a second one)")
        else:
            messages = value
    if messages is None and beside and os.path.isfile(beside):  # what dump_on_oom saved beside its snapshot
        messages = parse_messages(_read_text(beside))
        names.append(beside)
    return messages or [], snapshot, where, features


def _read(name: str) -> tuple[dict | list[OomMessage], str | None, frozenset[Feature] | None]:
    """(the snapshot dict or the messages, the file's path, what the job did where a trial's record says) for a
    source; a folder is a results folder."""
    from ..sim.limits import MAX_SNAPSHOT_BYTES
    from ..sim.compact import XZ_MAGIC
    from ..sim.pickles import PICKLE_PROTO, unpickle_snapshot

    if name != "-" and os.path.isdir(name):
        messages, features = _results_message(name)
        return messages, None, features
    try:
        # a log of any size is read from its end (_log_text); a snapshot is read whole, within the limit
        f = open_input(name, MAX_SNAPSHOT_BYTES, "a memory snapshot or a log", DiagnoseError, whole=False)
    except OSError as exc:
        raise DiagnoseError(f"cannot read {name!r}: {exc.strerror or exc}") from None
    with f:
        head = f.read(len(XZ_MAGIC))
        if not head:
            raise DiagnoseError(f"{name!r} is empty: expected an OOM message, a snapshot pickle or a results "
                                "folder")
        if head[:1] == bytes([PICKLE_PROTO]):
            if f.seekable() and os.fstat(f.fileno()).st_size > MAX_SNAPSHOT_BYTES:
                raise DiagnoseError(f"{name!r} is larger than the {format_bytes(MAX_SNAPSHOT_BYTES)} alloctune "
                                    f"reads as a memory snapshot")
            return unpickle_snapshot(head, f, name), None if name == "-" else name, None
        if head == XZ_MAGIC:
            raise DiagnoseError(f"{name!r} is a compact alloctune trace: it keeps the requests but not the state at "
                                "an OOM; give the snapshot pickle (alloctune.dump_on_oom) or the OOM message")
        text = _log_text(head, f, name)
    if looks_like_message(text):
        return parse_messages(text), None if name == "-" else name, None
    if error := driver_error(text):
        raise DiagnoseError(f"{name!r} holds '{error}', which prints no figures to diagnose: it comes from CUDA "
                            "or a library (cuBLAS, cuDNN, NCCL), or from torch before 0.4, not from the caching "
                            "allocator's 'CUDA out of memory. Tried to allocate ...'")
    raise DiagnoseError(f"{name!r} holds no CUDA out-of-memory message (expected 'CUDA out of memory. Tried "
                        "to allocate ...'), nor a snapshot pickle, nor a results folder")


# How much of a log's end is read: the message read is the last one, and an OOM message with its traceback
# takes a few KiB; a whole training log can take gigabytes.
LOG_TAIL_BYTES = 64 * 2**20


def _read_text(path: str) -> str:
    from ..sim.limits import MAX_SNAPSHOT_BYTES

    try:
        with open_input(path, MAX_SNAPSHOT_BYTES, "a log", DiagnoseError, whole=False) as f:
            return _log_text(b"", f, path)
    except OSError as exc:
        raise DiagnoseError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _log_text(head: bytes, f: io.BufferedIOBase, name: str) -> str:
    """The last LOG_TAIL_BYTES of a log whose first bytes `head` were read already, as text (see `_text`), the parts
    near what an OOM says (`excerpt`)."""
    kept = bytearray(head + f.read(1 << 16))
    bom = bytes(kept[:2]) if kept.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else b""
    if not bom and b"\0" in kept:   # no text but UTF-16 holds NUL bytes: said now, not after reading it all
        raise DiagnoseError(f"{name!r} holds binary data: neither an OOM message or log, nor a snapshot pickle")
    dropped = 0   # bytes of the log before kept[0]: cut at an even count, UTF-16 keeps whole code units
    if f.seekable() and (start := (os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES) // 2 * 2) > len(kept):
        f.seek(start)   # a regular file: straight to its end, whatever its size
        kept, dropped = bytearray(), start
    while piece := f.read(1 << 20):
        kept += piece
        if len(kept) > 2 * LOG_TAIL_BYTES:
            cut = (len(kept) - LOG_TAIL_BYTES) // 2 * 2
            del kept[:cut]
            dropped += cut
    if len(kept) > LOG_TAIL_BYTES:
        cut = (len(kept) - LOG_TAIL_BYTES) // 2 * 2
        del kept[:cut]
        dropped += cut
    return excerpt(_text(bom + bytes(kept) if dropped else bytes(kept)))


def _text(data: bytes) -> str:
    """A log's text: UTF-16 when it starts with a byte-order mark (Windows PowerShell 5 writes redirected output
    so), else UTF-8, bytes that are neither replaced."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def _results_message(folder: str) -> tuple[list[OomMessage], frozenset[Feature] | None]:
    from ..results.folder import ResultsFolder
    from ..results.names import SWEEP_FILE, TRIALS_FILE
    from ..results.records import Backend, TrialState
    from ..results.trials import TrialStore

    path = os.path.join(folder, TRIALS_FILE)
    if not os.path.lexists(path):
        dumps = sorted(glob.glob(os.path.join(glob.escape(folder), "oom-rank*.pickle")))
        if dumps:   # the folder given to alloctune.dump_on_oom
            raise DiagnoseError(f"{folder!r} holds the snapshots dump_on_oom wrote, one per rank: give one of "
                                f"them ({', '.join(dumps[:4])}{', ...' if len(dumps) > 4 else ''})")
        raise DiagnoseError(f"{folder!r} is a folder without {TRIALS_FILE}: not a results folder")
    failed = [r for r in TrialStore(path).load() if r.state is TrialState.OOM]
    if not failed:
        raise DiagnoseError(f"{folder!r} has no trial that ended in an OOM")
    last = ([r for r in failed if r.backend != Backend.SIM] or failed)[-1]   # a measured one has a message
    if last.backend == Backend.SIM:   # a replay ran out: the simulator prints no message, the replay shows it all
        paths = ResultsFolder(folder).info().trace_paths if os.path.lexists(os.path.join(folder, SWEEP_FILE)) else []
        # the traces a hybrid sweep recorded into its folder (one per rank of a command of several) are there
        traces = " ".join(shlex.quote(os.path.join(folder, p) if os.path.exists(os.path.join(folder, p)) else p)
                          for p in paths) or "TRACE"
        budget = f" --budget {last.budget_bytes // 2**20}MiB" if last.budget_bytes else ""
        raise DiagnoseError(f"{folder!r}: its OOM trials were replayed, not run (setting {conf_label(last.conf)!r}: "
                            f"{shown(last.error, 200)}), and a replay's OOM leaves no message to diagnose; see the "
                            f"peaks and where it ran out with `alloctune replay {traces} --conf "
                            f"{shlex.quote(conf_label(last.conf))}{budget}`, or measure it on a GPU")
    if not last.error or not looks_like_message(last.error):
        raise DiagnoseError(f"{folder!r}: the OOM trial of setting {conf_label(last.conf)!r} kept no message "
                            "this reader knows")
    features = frozenset(Feature(v) for v in last.features if v in set(Feature)) if last.features is not None else None
    return parse_messages(last.error), features   # a command of several ranks: each may have failed
