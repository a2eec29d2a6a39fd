"""Files of a results folder that change together or not at all (`ResultsFolder.together`: what a decision writes,
choice.json, summary.md, plot.png and best.env).

Each file is written whole under a staged name beside its own (`staged`); then a marker listing the batch is
written (`commit`: the commit point), the files are renamed into place in the writer's order (choice.json last:
a reader of the choice sees the files it was written with), and the marker removed. A process killed before the
marker leaves the old files whole; killed after it, the next writer, or a reader of the choice, finishes the
renames (`settle`), which also drops staged files no marker names. So whoever reads the folder sees all old or all
new files.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from ..files import put_in_place, sync_folder, write_file
from .names import PENDING_FILE, staged as staged_name
from .typed import Check, checked_text, from_json, load_json



def staged(folder: Path, name: str) -> Path:
    """Where a batch writes the folder's file `name` before it is renamed into place."""
    return folder / staged_name(name)


def _plain_name(name: str) -> str | None:
    return None if name and "/" not in name and not name.startswith(".") else f"expected a file name, got {name!r}"


@dataclass(frozen=True)
class Pending:
    """The marker of a committed batch: the files to rename into place, in that order, and those to remove."""

    written: list[Annotated[str, Check(_plain_name)]]
    removed: list[Annotated[str, Check(_plain_name)]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _read(data: object, where: str) -> Pending:
    return from_json(Pending, data, where)


def commit(folder: Path, written: list[str], removed: list[str]) -> None:
    """Put a batch whose files are staged in place, `written` in its order: the marker, then `finish`."""
    pending = Pending(list(written), sorted(removed))
    write_file(folder / PENDING_FILE, checked_text(pending.to_json(), _read, PENDING_FILE) + "\n")
    _finish(folder, pending)


def discard(folder: Path, names: list[str]) -> None:
    """Drop the staged files of a batch that was not committed."""
    for name in names:
        staged(folder, name).unlink(missing_ok=True)


def settle(folder: Path) -> None:
    """With the writer lock held: finish a batch a killed process committed, and drop staged files of one it had
    not."""
    marker = folder / PENDING_FILE
    if marker.exists():
        _finish(folder, _read(load_json(marker), str(marker)))
    for stray in folder.glob(staged(Path(), "*").name):
        stray.unlink(missing_ok=True)


def _finish(folder: Path, batch: Pending) -> None:
    """Removals, then renames in order, then the marker removed. Safe to run again where it stopped."""
    for name in batch.removed:
        (folder / name).unlink(missing_ok=True)
    for name in batch.written:
        if staged(folder, name).exists():
            put_in_place(staged(folder, name), folder / name)
    sync_folder(folder)
    (folder / PENDING_FILE).unlink(missing_ok=True)
