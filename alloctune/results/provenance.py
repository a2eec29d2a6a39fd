"""Where a trace's numbers come from: a recording made on a GPU, or a dry run (alloctune/dryrun: the program run
without a GPU, fake tensors standing for CUDA's) for a card. The dry run writes `DryRun` into the trace's metadata
(`dry_run`); every reader takes it back through the typed reader (`provenance`), and every command says it from the
one `Provenance` (report/provenance.py has the words; `DryRunSaid`, from `Provenance.said`, is the `dry_run` field
of each --json, and of a fit's fit.json for its traces together: `jointly`).

Standard library and light modules only: the dry run writes the record inside the user's process.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

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
class DryRunSaid:
    """What a command says of a dry run (the `dry_run` field of its --json; fit.json's): the card, the table's row,
    the values made up (in all, and by kind), the convolutions whose workspace only the card decides and what they
    may add to the peak reserved under the default setting (None: not replayed)."""

    card: str
    arch: str
    table: str
    invented: Count
    invented_by_kind: dict[str, Count]
    unknown_workspaces: Count
    reserved_up_to_bytes: Bytes | None


@dataclass(frozen=True)
class Provenance:
    """A trace's origin: measured on a GPU (`dry_run` None), or a dry run's."""

    dry_run: DryRun | None = None

    @property
    def measured(self) -> bool:
        return self.dry_run is None

    def said(self) -> DryRunSaid | None:
        d = self.dry_run
        if d is None:
            return None
        w = d.workspaces
        return DryRunSaid(d.card, d.arch, d.table, d.made_up, dict(d.invented), w.convolutions if w else 0,
                          w.reserved_up_to_bytes if w else None)

    def to_json(self) -> dict[str, Any] | None:
        """The `dry_run` field of a command's --json: null for a recording made on a GPU."""
        said = self.said()
        return None if said is None else asdict(said)


def jointly(ps: Sequence[Provenance]) -> DryRunSaid | None:
    """What traces that answer together (a fit's, one per value) are: recordings made on a GPU (None), or dry runs
    for one card by one table row, their values made up and unknown workspaces counted over all of them and the most
    any may add. A mix, which no curve should join, is refused (ValueError: why, in words)."""
    said = [p.said() for p in ps]
    dry = [s for s in said if s is not None]
    if not dry:
        return None
    if len(dry) < len(said):
        raise ValueError(f"the traces mix dry runs ({len(dry)}) and recordings made on a GPU ({len(said) - len(dry)}): "
                         f"fit traces of one kind")
    if len(kinds := {(s.card, s.table) for s in dry}) > 1:
        raise ValueError("the traces are dry runs for different cards or table rows (" +
                         ", ".join(sorted(f"{card}, table row {table}" for card, table in kinds)) + "): fit one's")
    by_kind: dict[str, Count] = {}
    for s in dry:
        for kind, n in s.invented_by_kind.items():
            by_kind[kind] = by_kind.get(kind, 0) + n
    up_to = [s.reserved_up_to_bytes for s in dry if s.reserved_up_to_bytes is not None]
    return DryRunSaid(dry[0].card, dry[0].arch, dry[0].table, sum(s.invented for s in dry), by_kind,
                      sum(s.unknown_workspaces for s in dry), max(up_to, default=None))


def provenance(meta: Mapping[str, Any], where: str = "the trace's meta 'dry_run'",
               error: type[Exception] = ValueError) -> Provenance:
    """The provenance a trace's metadata says (its `dry_run` entry, checked: damage is one `error` line); a
    replayed trial's environment carries the same entry (sweeper/executors/sim.py)."""
    entry = meta.get("dry_run")
    return Provenance(None if entry is None else from_json(DryRun, entry, where, error))

