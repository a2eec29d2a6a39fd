"""What diagnose reads: each source given (a message, a log of any size read from its end, a memory snapshot
pickle, a results folder's last OOM trial) and the message dump_on_oom saved beside its snapshot. An out-of-memory
error that prints no figures (from outside the caching allocator, or cuDNN's likely one: `message.outside_error`,
`message.likely_error`) is named: alone, it is refused in words saying which it is; beside an allocator's message
or a snapshot, it is noted. A text, or a trial's error, that reports running out of memory only in other words
(runtime/oom.py's rule: a library that caught torch's error and raised its own, PyTorch on another device, host
memory) is refused quoting them, with what its words tell (`_no_message`)."""
from __future__ import annotations

import codecs
import glob
import io
import os
import shlex

from ..errors import DiagnoseError, shown
from ..files import open_input
from ..runtime.oom import oom_line
from ..settings.conf import conf_label
from ..settings.known import Feature
from ..units import format_bytes
from .message import OomMessage, excerpt, likely_error, looks_like_message, outside_error, parse_messages, readings


def read_sources(names: list[str]) -> tuple[list[OomMessage], dict | None, str, frozenset[Feature] | None,
                                            list[str]]:
    """The messages (every OOM of one message source, or of what dump_on_oom saved beside its snapshot), the
    snapshot and its name, what the job did where a trial's record says, and notes of OOMs without figures read
    beside them; `names` gains the file whose message is read beside the snapshot."""
    messages: list[OomMessage] | None = None
    snapshot: dict | None = None
    where, beside, features, notes = "", None, None, []
    for name in list(names):
        value, path, features, note = _read(name)
        notes += [note] if note else []
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
        text = _read_text(beside)
        read = readings(text)
        if looks_like_message(read):
            messages = parse_messages(text)
            names.append(beside)
        elif other := _without_figures(read):   # an uncaught OOM of a library's, saved after the allocator's
            notes.append(f"{beside!r}, beside the snapshot, holds {other[0]}: the snapshot's figures are diagnosed")
    return messages or [], snapshot, where, features, notes


def _read(name: str) -> tuple[dict | list[OomMessage], str | None, frozenset[Feature] | None, str | None]:
    """(the snapshot dict or the messages, the file's path, what the job did where a trial's record says, a note of
    an OOM without figures beside the messages) for a source; a folder is a results folder."""
    from ..sim.limits import MAX_SNAPSHOT_BYTES
    from ..sim.compact import XZ_MAGIC
    from ..sim.pickles import PICKLE_PROTO, unpickle_snapshot

    if name != "-" and os.path.isdir(name):
        messages, features = _results_message(name)
        return messages, None, features, None
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
            return unpickle_snapshot(head, f, name), None if name == "-" else name, None, None
        if head == XZ_MAGIC:
            raise DiagnoseError(f"{name!r} is a compact alloctune trace: it keeps the requests but not the state at "
                                "an OOM; give the snapshot pickle (alloctune.dump_on_oom) or the OOM message")
        text, dropped = _log_text(head, f, name)
    read = readings(text)
    if looks_like_message(read):
        other = _without_figures(read)
        note = f"{name!r} also holds {other[0]}: the caching allocator's message is diagnosed" if other else None
        return parse_messages(text), None if name == "-" else name, None, note
    # a log read from its end: an OOM before the part read is not seen
    part = f", in its last {format_bytes(LOG_TAIL_BYTES)} (all that is read of a long log)," if dropped else ""
    if said := _no_message(text, read, part):
        raise DiagnoseError(f"{name!r} holds {said}")
    raise DiagnoseError(f"{name!r} holds{part} no CUDA out-of-memory message (expected 'CUDA out of memory. Tried "
                        "to allocate ...'), nor a snapshot pickle, nor a results folder")


def _no_message(text: str, read: list[str], part: str = "") -> str | None:
    """What a text (`read`: its `readings`) without the caching allocator's message holds in its place, in words
    that follow "holds": an out-of-memory error without figures (`_without_figures`), else one in other words
    (runtime/oom.py's rule, as a trial counts it: `oom_line`), said with what its words tell of it; None if neither.
    `part`: where only the end of a long log was read, the words that say so, between commas."""
    if other := _without_figures(read):
        return "".join(other)
    if not (said := oom_line(text)):
        return None
    said = said if len(said) <= 160 else said[:157] + "..."
    low = said.lower()
    if device := next((name for words, name in _OTHER_DEVICES if words in low), None):
        why = f"it is PyTorch's message on {device}, not CUDA's, and diagnose reads CUDA's alone"
    elif host := next((name for words, name in _HOST if words in low), None):
        why = f"it is {host}, on the host's memory, not the GPU's"
    elif "cuda" in low or "torch" in low:   # a library that caught torch's error and raised its own
        why = ("where a library caught torch's error and raised its own (vLLM does), give the whole log, torch's "
               "error before it")
    else:
        why = "its words name neither CUDA nor torch, and diagnose reads the CUDA caching allocator's message alone"
    return (f"a report of running out of memory ({said!r}) but{part} no message of torch's CUDA caching allocator, "
            f"the one with figures (expected 'CUDA out of memory. Tried to allocate ...'): {why}")


# PyTorch's out-of-memory messages on other devices (its allocators for them print their own), and the host's
# (Linux's OOM killer: "Out of memory: Killed process N", "Kill process N" before 4.19), by their words
_OTHER_DEVICES = (("hip out of memory", "ROCm (HIP)"), ("xpu out of memory", "Intel GPUs (XPU)"),
                  ("mps backend out of memory", "Apple's MPS backend"))
_HOST = (("out of memory: kill", "the kernel's OOM killer's report"),
         ("java.lang.outofmemoryerror", "Java's error for its heap"))


def _without_figures(read: list[str]) -> tuple[str, str] | None:
    """An out-of-memory error in a text's `readings` that prints no figures: one from outside the caching allocator,
    else cuDNN's likely one; in words, and where figures can be had ("" where nowhere). None if they hold neither."""
    if error := outside_error(read):
        return (f"'{error}', an out-of-memory error from CUDA or a library (cuBLAS, cuDNN, NCCL...), or from torch "
                "before 0.4, outside the caching allocator, which prints no figures to diagnose", "")
    if error := likely_error(read):   # PyTorch skips each algorithm whose workspace it cannot allocate
        return (f"'{error}': likely out of memory: cuDNN found no algorithm whose workspace fits (a convolution this "
                "cuDNN does not support ends the same way), and it prints no figures to diagnose",
                "; alloctune.dump_on_oom saves a snapshot, which has them, when a workspace allocation fails")
    return None


# How much of a log's end is read: the message read is the last one, and an OOM message with its traceback
# takes a few KiB; a whole training log can take gigabytes.
LOG_TAIL_BYTES = 64 * 2**20


def _read_text(path: str) -> str:
    from ..sim.limits import MAX_SNAPSHOT_BYTES

    try:
        with open_input(path, MAX_SNAPSHOT_BYTES, "a log", DiagnoseError, whole=False) as f:
            return _log_text(b"", f, path)[0]
    except OSError as exc:
        raise DiagnoseError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _log_text(head: bytes, f: io.BufferedIOBase, name: str) -> tuple[str, int]:
    """The last LOG_TAIL_BYTES of a log whose first bytes `head` were read already, as text (see `_text`), the parts
    near what an OOM says (`excerpt`); and how many bytes before them were not read."""
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
    return excerpt(_text(bom + bytes(kept) if dropped else bytes(kept))), dropped


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
    error = last.error or ""
    if not looks_like_message(read := readings(error)):
        raise DiagnoseError(f"{folder!r}: the OOM trial of setting {conf_label(last.conf)!r} kept "
                            + (_no_message(error, read) or "no message this reader knows"))
    features = frozenset(Feature(v) for v in last.features if v in set(Feature)) if last.features is not None else None
    return parse_messages(error), features   # a command of several ranks: each may have failed
