"""Which results folder a sweep writes: the one it is told (`out`), else the newest folder of the same sweep
(resumed, unless `fresh`), else a new timestamped one; locked before it is read or written."""
from __future__ import annotations

import contextlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..errors import AlloctuneError, FolderBusy, OptionText, ResultsError
from ..results.folder import ResultsFolder, SweepInfo, sweep_text
from ..results.names import LOCK_FILE, SWEEP_FILE
from .options import SweepOptions


def open_folder(info: SweepInfo, options: SweepOptions, notice: Callable[[str], None],
                held: contextlib.ExitStack) -> ResultsFolder:
    """The folder for the sweep `info` describes, its lock held in `held`: a folder another sweep is writing is
    refused. An `out` that holds files but no sweep is the user's own folder: refused before anything is written
    there. So is a sweep whose sweep.json would not read back, before any folder exists."""
    sweep_text(info)
    if options.out is not None:
        folder = ResultsFolder(options.out)
        if not (folder.path / SWEEP_FILE).exists() and (theirs := _not_ours(folder.path)):
            listed = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
            raise AlloctuneError(OptionText(
                "{out} {path} holds {listed} and no sweep (no {name}): a sweep writes into a results folder "
                "of its own, so give a new or empty folder", path=folder.path, listed=listed, name=SWEEP_FILE))
        _locked(folder, held)
        if (folder.path / SWEEP_FILE).exists():
            if _identity(folder.info()) != _identity(info):
                raise AlloctuneError(OptionText(
                    "{path} holds a different sweep (workload, grid, repeats, budget, backend, interpreters or "
                    "growth check differ); choose another {out}", path=folder.path))
            notice(f"Resuming the sweep in {folder.path}")
            return folder
        folder.write_info(info)
        return folder
    root = Path(options.results_root)
    if not options.fresh and root.is_dir():
        for path in sorted(root.glob(f"{info.workload_label}-*"), reverse=True):
            try:
                same = _identity(ResultsFolder(path).info()) == _identity(info)
            except AlloctuneError:
                continue
            if same:
                folder = _locked(ResultsFolder(path), held)
                notice(OptionText("Resuming the sweep in {path} (use {fresh=True} to start a new one)", path=path))
                return folder
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    folder = ResultsFolder(root / f"{info.workload_label}-{stamp}")
    if folder.path.resolve().parent != root.resolve():  # a name is never a path (the loader checks; so do we)
        raise AlloctuneError(f"workload and preset names must not contain path separators: {info.workload_label!r}")
    _locked(folder, held)
    if (folder.path / SWEEP_FILE).exists():  # another sweep of this second finished already
        raise AlloctuneError(f"{folder.path} was created by another sweep a moment ago; run again")
    folder.write_info(info)
    return folder


def _not_ours(path: Path) -> list[str]:
    """What a folder holds besides a lock file alloctune left (sorted names), when it is a folder."""
    return sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE) if path.is_dir() else []


def _locked(folder: ResultsFolder, held: contextlib.ExitStack) -> ResultsFolder:
    """`folder`, its writer lock held until `held` closes, and a decision a killed report left half written
    finished (`settle`)."""
    try:
        held.enter_context(folder.lock())
    except FolderBusy as busy:   # another sweep writes the folder: this one can go elsewhere
        raise ResultsError(OptionText("{busy}, or choose another folder with {out} or {fresh=True}",
                                      busy=str(busy))) from None
    folder.settle()
    return folder


def _identity(info: SweepInfo) -> tuple:
    """What makes two sweeps the same sweep (so the second resumes the first)."""
    return (info.workload_hash, info.grid, info.repeats, info.auto_repeats, info.confirm, info.budget_bytes, info.budget_fraction,
            info.backend, sorted(info.envs), (info.trace or {}).get("sha256"), info.search, info.finalists,
            info.check_growth)
