"""The trials file: JSON lines, one finished trial per line, appended and flushed at once.

An interrupted sweep loses nothing but the trial in flight; a torn last line (killed mid-write) is skipped
with a warning. Every line carries the schema version; a line of a version this code does not know is refused.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from .errors import ResultsError
from .records import SCHEMA_VERSION, TrialRecord

TRIALS_FILE = "trials.jsonl"


class TrialStore:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def append(self, record: TrialRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._drop_torn_line()
        line = json.dumps(record.to_json(), sort_keys=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _drop_torn_line(self) -> None:
        """A sweep killed mid-write leaves a last line without its newline: cut it off before appending, or it
        would end up in the middle of the file (the trial it belonged to is not finished and runs again)."""
        if not self.path.exists():
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def load(self) -> list[TrialRecord]:
        if not self.path.exists():
            return []
        records = []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):  # torn write of an interrupted sweep
                    warnings.warn(f"{self.path}:{number}: ignoring a truncated last line")
                    continue
                raise ResultsError(f"{self.path}:{number}: not a JSON line") from None
            schema = data.get("schema") if isinstance(data, dict) else None
            if schema != SCHEMA_VERSION:
                raise ResultsError(
                    f"{self.path}:{number}: trials schema version {schema!r}; this alloctune reads version "
                    f"{SCHEMA_VERSION}")
            try:
                records.append(TrialRecord.from_json(data))
            except (TypeError, ValueError, KeyError) as exc:
                raise ResultsError(f"{self.path}:{number}: malformed trial record: {exc}") from None
        return records

    def finished_keys(self) -> set[tuple]:
        return {r.key for r in self.load()}
