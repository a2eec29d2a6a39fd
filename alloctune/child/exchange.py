"""What the parent (`trial/launch.py`) and the trial child (`child/main.py`) exchange, one file each way: the task
(`spec.json`, a `ChildSpec`, with its schema) and the result (`ChildResult`, at the path the task names). Both are
read through the typed reader: damage is one line naming the file and the field. Light: the child imports it."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from ..files import write_file
from ..results.records import Measurement, TrialState
from ..results.typed import Check, from_json, load_json
from ..workload.spec import WorkloadSpec

SPEC_SCHEMA = 1   # parent and child are one checkout, so the child reads this version only
SPEC_FILE = "spec.json"


def _schema_problem(schema: int) -> str | None:
    return None if schema == SPEC_SCHEMA else f"expected {SPEC_SCHEMA} (this alloctune's), got {schema}"


@dataclass(frozen=True)
class ChildSpec:
    """One trial for the child to run: the workload under the setting `conf` (already in the child's environment:
    the child checks it is the one in force), within the budget, and where to write what happened."""

    schema: Annotated[int, Check(_schema_problem)]
    workload: WorkloadSpec
    workload_hash: str
    env_id: str
    conf: str                          # the setting asked for, as AllocConf writes it
    result: str                        # where the child writes its ChildResult
    budget_bytes: int | None = None    # the memory budget, in bytes or as a fraction of the device (or neither)
    budget_fraction: float | None = None
    record_trace: str | None = None    # record the allocation trace of the warm pass to this snapshot pickle

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def write_spec(folder: str, spec: ChildSpec) -> str:
    """`spec` written whole as `folder`/spec.json; its path."""
    path = os.path.join(folder, SPEC_FILE)
    write_file(path, json.dumps(spec.to_json()))
    return path


def read_spec(path: str) -> ChildSpec:
    """The task in `path`; ResultsError (one line: the file and the field) for one that does not read."""
    return from_json(ChildSpec, load_json(path), path)


@dataclass(frozen=True)
class ChildResult:
    """What the trial child writes; a missing, garbled or mistyped file means the trial crashed."""

    state: TrialState
    measurement: Measurement | None = None
    error: str | None = None
    effective_conf: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
