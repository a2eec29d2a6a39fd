"""Where a trace's numbers come from: a recording made on a GPU, or a dry run (alloctune/dryrun: the program run
without a GPU, fake tensors standing for CUDA's) for a card. The dry run writes `DryRun` into the trace's metadata
(`dry_run`); every reader takes it back through the typed reader (`provenance`), and every command says it from the
one `Provenance` (report/provenance.py has the words; `Provenance.to_json` is the `dry_run` field of each --json).

Standard library and light modules only: the dry run writes the record inside the user's process.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .records import Bytes, Count
from .typed import from_json


@dataclass(frozen=True)
class Workspaces:
    """cuDNN convolutions the dry run traced without their workspace (cuDNN picks the algorithm, and so the
    workspace, on the card: dryrun/convolutions.py): how many, the rule that bounds each one, and what the trace
    replayed with each at that bound adds to its peak reserved under the default setting on the card
    (`reserved_up_to_bytes`, once the parent replayed it: sim/workspaces.py; None before). Where each would go is
    the trace's `workspace_sites`, apart: this record is small enough for every replayed trial's environment."""

    convolutions: Count
    bound: str
    reserved_up_to_bytes: Bytes | None = None


@dataclass(frozen=True)
class DryRun:
    """What a dry run says of its trace: the card it stood for (`arch` as given, `card` its name), the row of the
    table of what the card's kernels add (`table`, and where its figures come from), the cuBLAS workspace it used,
    the values it made up where the program read the GPU's data (by kind), and the cuDNN convolutions whose
    workspace only the card decides (`workspaces`)."""

    arch: str
    card: str
    table: str
    table_source: str = ""
    cublas_workspace_bytes: Bytes = 0
    invented: dict[str, Count] = field(default_factory=dict)
    pid: int | None = None
    workspaces: Workspaces | None = None

    @property
    def made_up(self) -> int:
        return sum(self.invented.values())


@dataclass(frozen=True)
class Provenance:
    """A trace's origin: measured on a GPU (`dry_run` None), or a dry run's."""

    dry_run: DryRun | None = None

    @property
    def measured(self) -> bool:
        return self.dry_run is None

    def to_json(self) -> dict[str, Any] | None:
        """The `dry_run` field of a command's --json: null for a recording made on a GPU."""
        d = self.dry_run
        if d is None:
            return None
        w = d.workspaces
        return {"card": d.card, "arch": d.arch, "table": d.table, "invented": d.made_up,
                "invented_by_kind": dict(d.invented), "unknown_workspaces": w.convolutions if w else 0,
                "reserved_up_to_bytes": w.reserved_up_to_bytes if w else None}


def provenance(meta: dict, where: str = "the trace's meta 'dry_run'",
               error: type[Exception] = ValueError) -> Provenance:
    """The provenance a trace's metadata says (its `dry_run` entry, checked: damage is one `error` line); a
    replayed trial's environment carries the same entry (sweeper/executors/sim.py)."""
    entry = meta.get("dry_run")
    return Provenance(None if entry is None else from_json(DryRun, entry, where, error))

