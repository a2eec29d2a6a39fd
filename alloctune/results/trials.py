"""The trials file: JSON lines, one finished trial per line, appended and flushed at once.

An interrupted sweep loses nothing but the trial in flight. Every append holds an exclusive `flock` on the file
and writes its line in one `write` (O_APPEND), so concurrent writers never interleave or cut each other's lines.
Before appending, a last line without its newline is mended: kept (the newline added) when it is a complete
record, cut when it is torn (killed mid-write; that trial never counted as finished and runs again). A reader
skips a torn last line with a warning. Every line carries the schema version; a version this code does not know
is refused, and any damage is one `ResultsError` naming the file, the line and the field. The file is read line by
line, within MAX_TRIALS_BYTES and MAX_LINE_BYTES a line; it is appended to only where it is a regular file, never
through a symbolic link.
"""
from __future__ import annotations

import fcntl
import json
import os
import stat
import warnings
from pathlib import Path

from ..errors import ResultsError, shown
from ..files import open_input
from .records import SCHEMA_VERSION, TrialRecord, fitted
from .typed import checked_text, loads

_TAIL_CHUNK = 1 << 16
# The longest trial line in results/ takes 1.7 KB (a command's trial lists each of its processes, about 250 bytes
# apiece); a line 600 times that is not a trial, and `records.fitted` keeps every trial below it. 256 MiB holds
# some 150,000 such trials, where a search of 400 settings with 10 repeats under 2 interpreters records 8,000.
MAX_LINE_BYTES = 1 << 20
MAX_TRIALS_BYTES = 256 * 2**20


class TrialStore:
    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def append(self, record: TrialRecord) -> None:
        """Append `record` as one line, checked first as `load` reads it (ResultsError, nothing written, for a line
        `load` would refuse): a folder never holds a trial that makes it unreadable."""
        record = fitted(record)
        where = f"{self.path}: the trial of {record.conf or 'the default'} #{record.repeat + 1}"
        line = (checked_text(record.to_json(), TrialRecord.from_json, where, sort_keys=True) + "\n").encode()
        if len(line) > MAX_LINE_BYTES:   # fitted() bounds what a line carries: a programming error, still refused
            raise ResultsError(f"{where}: not written, its line of {len(line)} bytes passes the "
                               f"{MAX_LINE_BYTES // 2**20} MiB a reader takes")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError:
            if os.path.islink(self.path):   # refused, not replaced: the link may be how the user keeps the trials
                raise ResultsError(f"{self.path} is a symbolic link: alloctune appends trials to a file of the "
                                   f"results folder itself, never through a link") from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ResultsError(f"{self.path} is not a regular file: alloctune appends trials to a file")
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._mend_last_line(fd)
            view = memoryview(line)
            while view:  # one write for any size a regular file takes at once; the loop only guards the rest
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)  # releases the lock

    def _mend_last_line(self, fd: int) -> None:
        """With the lock held: end a complete last record with its newline, or cut a torn one."""
        size = os.fstat(fd).st_size
        if not size or os.pread(fd, 1, size - 1) == b"\n":
            return
        start = _last_line_start(fd, size)
        tail = os.pread(fd, size - start, start) if size - start <= MAX_LINE_BYTES else b""
        if _is_record(tail):
            os.write(fd, b"\n")
        else:
            os.ftruncate(fd, start)

    def load(self) -> list[TrialRecord]:
        try:
            # a file a sweep wrote: a FIFO or a device there is refused, never read as no trials
            f = open_input(self.path, MAX_TRIALS_BYTES, "a trials file", ResultsError, regular=True)
        except FileNotFoundError:
            return []
        records = []
        with f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # a writer's line is read whole or not at all
            number = 0
            while line := f.readline(MAX_LINE_BYTES + 1):
                number += 1
                where = f"{self.path}:{number}"
                if not line.endswith(b"\n"):
                    if len(line) > MAX_LINE_BYTES:
                        raise ResultsError(f"{where}: a line longer than {MAX_LINE_BYTES // 2**20} MiB: not a trial")
                    if line.strip() and not _is_record(line):   # torn write of an interrupted sweep
                        warnings.warn(f"{where}: ignoring a truncated last line")
                        break
                if not line.strip():
                    continue
                record = loads(line, where)
                schema = record.get("schema") if isinstance(record, dict) else None
                if schema != SCHEMA_VERSION:
                    raise ResultsError(f"{where}: trials schema version {shown(schema)}; this alloctune reads "
                                       f"version {SCHEMA_VERSION}")
                records.append(TrialRecord.from_json(record, where))
        return records

    def finished_keys(self) -> set[tuple[str | int | None, ...]]:
        return {r.key for r in self.load()}


def _last_line_start(fd: int, size: int) -> int:
    """Offset just after the last newline before `size` (0 if none)."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _is_record(line: bytes) -> bool:
    """A complete JSON object: a line that lost only its newline, not a torn one."""
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False
