"""The trials file: JSON lines, one finished trial per line, appended and flushed at once.

An interrupted sweep loses nothing but the trial in flight. Every append holds an exclusive `flock` on the file
and writes its line in one `write` (O_APPEND), so concurrent writers never interleave or cut each other's lines.
Before appending, a last line without its newline is mended: kept (the newline added) when it is a complete
record, cut when it is torn (killed mid-write; that trial never counted as finished and runs again). A reader
skips a torn last line with a warning. Every line carries the schema version; a version this code does not know
is refused, and any damage is one `ResultsError` naming the file, the line and the field.
"""
from __future__ import annotations

import fcntl
import json
import os
import warnings
from pathlib import Path

from ..errors import ResultsError
from .records import SCHEMA_VERSION, TrialRecord
from .typed import loads

TRIALS_FILE = "trials.jsonl"
_TAIL_CHUNK = 1 << 16


class TrialStore:
    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def append(self, record: TrialRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(record.to_json(), sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
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
        tail = os.pread(fd, size - start, start)
        if _is_record(tail):
            os.write(fd, b"\n")
        else:
            os.ftruncate(fd, start)

    def load(self) -> list[TrialRecord]:
        try:
            with open(self.path, "rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # a writer's line is read whole or not at all
                data = f.read()
        except FileNotFoundError:
            return []
        records = []
        lines = data.split(b"\n")
        torn = lines[-1] if lines[-1].strip() and not _is_record(lines[-1]) else None
        for number, line in enumerate(lines[:-1] if torn is not None else lines, 1):
            if not line.strip():
                continue
            where = f"{self.path}:{number}"
            record = loads(line, where)
            schema = record.get("schema") if isinstance(record, dict) else None
            if schema != SCHEMA_VERSION:
                raise ResultsError(f"{where}: trials schema version {schema!r}; this alloctune reads version "
                                   f"{SCHEMA_VERSION}")
            records.append(TrialRecord.from_json(record, where))
        if torn is not None:  # torn write of an interrupted sweep
            warnings.warn(f"{self.path}:{len(lines)}: ignoring a truncated last line")
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
