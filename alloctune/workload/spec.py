"""`WorkloadSpec`: a validated workload, frozen, with its preset applied; what a sweep runs and hashes.

The file schema and its validation are `loader.py`. Trial children rebuild a spec with `WorkloadSpec.from_dict`:
this module imports nothing beyond the standard library and light modules.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import MISSING, asdict, dataclass, fields

from ..errors import WorkloadError
from ..files import sha256_of
from .builtin import entry_path

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # fullmatch: no path separator, no newline; names folders
DEFAULT_WARMUP_STEPS = 2
DEFAULT_TIMEOUT_S = 600.0       # per-trial time limit when neither the user nor the workload sets one
MAX_ENTRY_BYTES = 64 * 2**20   # a workload's module, hashed into its identity: far above any Python module
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a trial time limit beyond this is a typo (and inf overflows the wait)
WORKLOAD_SUFFIXES = (".yaml", ".yml")   # a workload file's name ends so, in any case (lower() it first)


def warmup_steps_or_default(given: int | None) -> int:
    """A command's warm-up steps: as given, else DEFAULT_WARMUP_STEPS. Its options keep None for 'not given', so
    that one given where it does not apply (beside a workload file, or traces) is refused, a 0 or a 2 too."""
    return DEFAULT_WARMUP_STEPS if given is None else given


@dataclass(frozen=True)
class WorkloadSpec:
    """A validated workload with its preset applied. Paths (entry file, trace) are absolute."""

    name: str
    description: str
    source: str | None             # the file it came from
    kind: str | None               # a built-in kind, or
    entry: str | None              # user code 'package.module:function' or '/abs/path/file.py:function'
    params: dict                   # passed to the factory (built-in defaults and preset merged in); JSON-able
    preset: str | None
    warmup_steps: int
    steps: int
    unit: str
    seed: int
    timeout_s: float | None = None             # per-trial time limit (None = the runner's default)
    grid: tuple[str, ...] | None = None        # canonical allocator settings, 'default' for the default
    trace: str | None = None                   # shipped allocation trace for simulator replay
    command: dict | None = None                # a command workload: CommandSpec.to_dict() (kind, entry None)

    def digest(self) -> str:
        """Stable hash of what defines the measurement: records with different digests do not compare.

        Name, description, grid, time limit and trace are left out: they do not change what a step does. A file
        entry counts by its file name and content, not its absolute path, so a checkout elsewhere compares.
        """
        what = {"kind": self.kind, "entry": _entry_identity(self.entry), "params": self.params,
                "warmup_steps": self.warmup_steps, "steps": self.steps, "seed": self.seed, "unit": self.unit}
        if self.command is not None:  # only then: the digests of other workloads stay what they were
            what["command"] = self.command
        text = json.dumps(what, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["grid"] = list(self.grid) if self.grid is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "WorkloadSpec":
        """Inverse of `to_dict` (e.g. `sweep.json`, or the trial child's task)."""
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        unknown, missing = sorted(set(data) - names), sorted(required - set(data))
        if unknown or missing:
            raise WorkloadError(f"workload record: unknown keys {unknown}, missing keys {missing}; "
                                f"expected exactly: {', '.join(sorted(names))}")
        data = dict(data)
        data["grid"] = tuple(data["grid"]) if data["grid"] is not None else None
        return cls(**data)


def _entry_identity(entry: str | None) -> str | None:
    path = entry_path(entry) if entry else None
    if path is None or entry is None:
        return entry
    try:
        content = sha256_of(path, MAX_ENTRY_BYTES, "a workload's module", WorkloadError)[:16]
    except (OSError, WorkloadError):   # none, or no module a workload runs (a FIFO is never waited on)
        content = "missing"
    return f"{os.path.basename(path)}:{entry.rpartition(':')[2]}@{content}"
