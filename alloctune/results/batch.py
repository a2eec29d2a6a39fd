"""Files of a results folder that change together or not at all (`ResultsFolder.together`: what a decision writes,
choice.json, summary.md, plot.png and best.env).

Each file is written whole under a staged name beside its own (`staged`); then a marker listing the batch is
written (`commit`: the commit point), the files are renamed into place in the writer's order (choice.json last:
a reader of the choice sees the files it was written with), and the marker removed. A process killed before the
marker leaves the old files whole; killed after it, the next writer finishes the renames (`settle`). So whoever
reads the folder sees all old or all new files. A reader changes nothing: it reads the files in place, the old set
until choice.json, the last rename, is the new one.

The marker is trusted only as far as the folder shows it was this batch's (`_accounted`): it names only files a
batch may change (`names`, the folder's), it writes one at least, and each file it writes is there with the
SHA-256 the marker holds for it, staged or already in place. A marker that cannot show that (planted, damaged, or
left by a batch whose staged files were since changed) is dropped with a warning, and nothing it names is removed
or renamed; staged files of the batch's names no marker accounts for are dropped.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from ..errors import ResultsError
from ..files import put_in_place, sha256_of, sync_folder, write_file
from .names import PENDING_FILE, staged as staged_name
from .typed import Check, checked_text, from_json, load_json

MAX_BATCH_FILE_BYTES = 1 << 30   # plot.png, the largest, takes some hundred KB


def staged(folder: Path, name: str) -> Path:
    """Where a batch writes the folder's file `name` before it is renamed into place."""
    return folder / staged_name(name)


def _plain_name(name: str) -> str | None:
    return None if name and "/" not in name and not name.startswith(".") else f"expected a file name, got {name!r}"


def _digest_problem(text: str) -> str | None:
    return None if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else \
        f"expected a SHA-256 in hexadecimal, got {text!r}"


@dataclass(frozen=True)
class Staged:
    """A file of a committed batch: its name and the SHA-256 of what the batch wrote."""

    name: Annotated[str, Check(_plain_name)]
    sha256: Annotated[str, Check(_digest_problem)]


@dataclass(frozen=True)
class Pending:
    """The marker of a committed batch: the files to rename into place, in that order, and those to remove."""

    written: list[Staged]
    removed: list[Annotated[str, Check(_plain_name)]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _read(data: object, where: str) -> Pending:
    return from_json(Pending, data, where)


def _sha256(path: Path) -> str | None:
    """The SHA-256 of the regular file `path`, None where there is none (or it cannot be read as one)."""
    try:
        return sha256_of(path, MAX_BATCH_FILE_BYTES, "a file of a decision", ResultsError)
    except (OSError, ResultsError):
        return None


def commit(folder: Path, written: list[str], removed: list[str]) -> None:
    """Put a batch whose files are staged in place, `written` in its order: the marker, then `finish`."""
    pending = Pending([Staged(name, _sha256(staged(folder, name)) or "") for name in written], sorted(removed))
    write_file(folder / PENDING_FILE, checked_text(pending.to_json(), _read, PENDING_FILE) + "\n")
    _finish(folder, pending)


def discard(folder: Path, names: list[str]) -> None:
    """Drop the staged files of a batch that was not committed."""
    for name in names:
        staged(folder, name).unlink(missing_ok=True)


def settle(folder: Path, names: Collection[str]) -> None:
    """With the writer lock held: finish a batch a killed process committed, as far as the folder accounts for it
    (the module's docstring); drop staged files of `names` (the files a batch of this folder may change) that no
    marker accounts for."""
    marker = folder / PENDING_FILE
    if os.path.lexists(marker):
        pending, why = _accounted(folder, names)
        if pending is not None:
            _finish(folder, pending)
        else:
            warnings.warn(f"{marker}: dropped, changing nothing it names: {why}")
            try:
                marker.unlink()
            except OSError as exc:   # a directory: not alloctune's
                raise ResultsError(f"{marker} {why}; remove it ({exc.strerror})") from None
    for name in names:
        staged(folder, name).unlink(missing_ok=True)


def _accounted(folder: Path, names: Collection[str]) -> tuple[Pending | None, str]:
    """The marker's batch where the folder shows it was one of this folder's (the module's docstring), else None
    and why not."""
    marker = folder / PENDING_FILE
    try:
        pending = _read(load_json(marker), str(marker))
    except ResultsError as exc:
        return None, f"it cannot be read ({exc})"
    strangers = sorted(({s.name for s in pending.written} | set(pending.removed)) - set(names))
    if strangers:
        return None, f"it names {', '.join(map(repr, strangers))}, which no batch of a results folder changes"
    if not pending.written:
        return None, "it writes no file, so nothing shows it was a batch's"
    for entry in pending.written:
        if entry.sha256 not in (_sha256(staged(folder, entry.name)), _sha256(folder / entry.name)):
            return None, f"{entry.name} is not there as the batch wrote it"
    return pending, ""


def _finish(folder: Path, batch: Pending) -> None:
    """Removals, then renames in order, then the marker removed. Safe to run again where it stopped."""
    for name in batch.removed:
        (folder / name).unlink(missing_ok=True)
    for entry in batch.written:   # each staged file as the batch wrote it (else it is in place already)
        if _sha256(staged(folder, entry.name)) == entry.sha256:
            put_in_place(staged(folder, entry.name), folder / entry.name)
    sync_folder(folder)
    (folder / PENDING_FILE).unlink(missing_ok=True)
