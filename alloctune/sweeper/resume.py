"""Which results folder a sweep writes: the one it is told (`out`), else the newest folder of the same sweep
(resumed, unless `fresh`), else a new timestamped one; locked before it is read or written. A resumed folder's
replays go on under the id they were written with (`keep_replay_ids`)."""
from __future__ import annotations

import contextlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..errors import AlloctuneError, FolderBusy, OptionText, ResultsError
from ..results.folder import ResultsFolder, SweepInfo, sweep_text
from ..results.names import LOCK_FILE, SWEEP_FILE
from ..results.records import Backend, sim_env_id
from ..sim.target import simulated_torch
from .options import SweepOptions
from .plan import Plan


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


def keep_replay_ids(folder: ResultsFolder, plan: Plan) -> None:
    """An interpreter's replays that an older alloctune named `sim:` + its id (a sweep that only replays, before it
    was named after the trace's torch; a dry run, before its release) go on under that id in the plan (`kept`),
    one group as before, not a second beside it; where they followed another torch than this sweep follows, going
    on would mix two torches in one group: refused in one line, before anything is written."""
    replays = [r for r in folder.trials() if r.backend == Backend.SIM]
    for p in plan.probes:
        older, planned = sim_env_id(p.env_id), plan.replay_env_id(p)
        theirs = {simulated_torch(r.env.get("simulated_as")) for r in replays if r.env_id == older}
        if older == planned or not theirs or any(r.env_id == planned for r in replays):
            continue
        follows = plan.target(p, plan.replayed[0] if plan.replayed else None).simulated
        if theirs != {follows}:
            raise AlloctuneError(OptionText(
                "{path} holds replays named {older} that followed torch {theirs}'s allocator, and this sweep replays "
                "the trace as torch {follows}'s: going on would mix two torches in one group; give {pythons} "
                "{python} to go on as torch {theirs}, or start anew with {fresh=True}", path=folder.path,
                older=older, theirs=", ".join(sorted(theirs)), follows=follows, python=p.python))
        plan.kept[p.env_id] = older


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
