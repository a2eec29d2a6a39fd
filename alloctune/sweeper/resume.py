"""Which results folder a sweep writes: the one it is told (`out`), else the newest folder of the same sweep
(resumed, unless `fresh`), else a new timestamped one; locked before it is read or written. The same sweep is the
same workload asked the same (`_identity`) whose command's files (`command_files`: its script) are as they were. A
new folder the sweep leaves without a trial goes again (`_made`). A resumed folder's replays go on under the id they
were written with (`keep_replay_ids`)."""
from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ..errors import AlloctuneError, FolderBusy, OptionText, ResultsError
from ..files import sha256_of
from ..results.folder import FileStamp, ResultsFolder, SweepInfo, sweep_text
from ..results.names import LOCK_FILE, SWEEP_FILE, TRIALS_FILE
from ..results.records import Backend, TrialRecord, sim_env_id
from ..sim.target import simulated_torch
from ..workload.command import CommandSpec, is_python
from .options import SweepOptions
from .plan import Plan

# A file a command names is read whole at each start up to this size (a script is far below it); a larger one (data)
# is known by its size and modification time.
MAX_HASHED_BYTES = 64 * 2**20


def open_folder(info: SweepInfo, options: SweepOptions, notice: Callable[[str], None],
                held: contextlib.ExitStack) -> ResultsFolder:
    """The folder for the sweep `info` describes, its lock held in `held`: a folder another sweep is writing is
    refused. An `out` that holds files but no sweep is the user's own folder: refused before anything is written
    there; so is one that holds this sweep of a command whose files changed since. So is a sweep whose sweep.json
    would not read back, before any folder exists. A folder of this sweep whose command's files changed since is
    passed by: the sweep starts anew, and says which file changed."""
    files = command_files(info.workload)
    info = replace(info, files=files)
    sweep_text(info)
    if options.out is not None:
        folder = ResultsFolder(options.out)
        if not (folder.path / SWEEP_FILE).exists():
            if theirs := _not_ours(folder.path):
                listed = ", ".join(theirs[:3]) + (", ..." if len(theirs) > 3 else "")
                raise AlloctuneError(OptionText(
                    "{out} {path} holds {listed} and no sweep (no {name}): a sweep writes into a results folder "
                    "of its own, so give a new or empty folder", path=folder.path, listed=listed, name=SWEEP_FILE))
            return _made(folder, info, held)
        _locked(folder, held)
        kept = folder.info()
        if _identity(kept) != _identity(info):
            raise AlloctuneError(OptionText(
                "{path} holds a different sweep (workload, grid, repeats, budget, backend, interpreters or "
                "growth check differ); choose another {out}", path=folder.path))
        if changed := _changed(kept.files, files):
            raise AlloctuneError(OptionText(
                "{path} holds the sweep of {file} as it was before it changed; choose another {out}, or leave it "
                "out to start a new folder", path=folder.path, file=changed))
        notice(_resuming("Resuming the sweep in {path}", folder.path, kept, files))
        return folder
    root = Path(options.results_root)
    passed: tuple[str, Path] | None = None   # the newest folder of this sweep whose command's file changed since
    for path in sorted(root.glob(f"{info.workload_label}-*"), reverse=True) if not options.fresh else ():
        try:
            kept = ResultsFolder(path).info()
        except AlloctuneError:
            continue
        if _identity(kept) != _identity(info):
            continue
        if changed := _changed(kept.files, files):
            passed = passed or (changed, path)
            continue
        folder = _locked(ResultsFolder(path), held)
        notice(_resuming("Resuming the sweep in {path} (use {fresh=True} to start a new one)", path, kept, files))
        return folder
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    folder = ResultsFolder(root / f"{info.workload_label}-{stamp}")
    if folder.path.resolve().parent != root.resolve():  # a name is never a path (the loader checks; so do we)
        raise AlloctuneError(f"workload and preset names must not contain path separators: {info.workload_label!r}")
    folder = _made(folder, info, held)
    if passed:
        notice(f"{passed[0]} has changed since the sweep in {passed[1]}: starting a new sweep in {folder.path}")
    return folder


def command_files(workload: dict[str, Any]) -> list[FileStamp]:
    """The files a command workload names, as they are now: each of its words that is a regular file, and the
    value of an --option=FILE, relative to its working folder; a `-m` module found as a file under that folder
    (pkg/mod.py, pkg/mod/__main__.py; an installed one is not followed); the program too, unless it is Python (a
    change of which the interpreters' probe shows). Nothing for another workload: its definition, an entry
    module's content among it, is its `workload_hash`."""
    if workload.get("command") is None:
        return []
    command = CommandSpec.from_dict(workload["command"])
    where = Path(command.cwd or os.getcwd())
    words = list(command.argv[1:] if is_python(command.argv[0]) else command.argv)
    named: list[Path] = []
    for before, word in zip(["", *words], words):
        if before == "-m":
            module = where / word.replace(".", os.sep)
            named += [module.parent / f"{module.name}.py", module / "__main__.py"]
        else:
            named.append(where / (word.partition("=")[2] if word.startswith("-") else word))
    return [_stamp(path) for path in dict.fromkeys(os.path.abspath(p) for p in named if p.is_file())]


def _stamp(path: str) -> FileStamp:
    status = os.stat(path)
    digest = None
    if status.st_size <= MAX_HASHED_BYTES:
        with contextlib.suppress(OSError, AlloctuneError):   # unreadable: known by its size and time
            digest = sha256_of(path, MAX_HASHED_BYTES, "a file the command names")
    return FileStamp(path, status.st_size, status.st_mtime_ns, digest)


def _changed(kept: list[FileStamp] | None, now: list[FileStamp]) -> str | None:
    """The first file of `now` that is not as `kept` has it (by content where both read it, else by size and time),
    or that `kept` had and `now` has not; None where they are the same, or `kept` is of a folder from before."""
    if kept is None:
        return None
    before = {s.path: s for s in kept}
    for stamp in now:
        was = before.pop(stamp.path, None)
        if was is None or ((was.sha256 != stamp.sha256) if was.sha256 and stamp.sha256 else
                           (was.size, was.mtime_ns) != (stamp.size, stamp.mtime_ns)):
            return stamp.path
    return next(iter(before), None)


def _resuming(said: str, path: Path, kept: SweepInfo, files: list[FileStamp]) -> OptionText:
    """The notice `said` (a template of {path}) of a resumed sweep; for a folder from before its command's files
    were kept, that whether they changed since cannot be told."""
    if kept.files is None and files:
        said += ("; its folder is from an older alloctune, which kept no record of the command's files: whether "
                 "{files} changed since cannot be told")
    return OptionText(said, path=path, files=", ".join(s.path for s in files))


def keep_replay_ids(earlier: list[TrialRecord], path: Path, plan: Plan) -> None:
    """An interpreter's replays that an older alloctune named `sim:` + its id (a sweep that only replays, before it
    was named after the trace's torch; a dry run, before its release) go on under that id in the plan (`kept`),
    one group as before, not a second beside it; where they followed another torch than this sweep follows, going
    on would mix two torches in one group: refused in one line, before anything is written."""
    replays = [r for r in earlier if r.backend == Backend.SIM]
    for p in plan.probes:
        older, planned = sim_env_id(p.env_id), plan.replay_env_id(p)
        theirs = {simulated_torch(r.env.get("simulated_as")) for r in replays if r.env_id == older}
        if older == planned or not theirs or any(r.env_id == planned for r in replays):
            continue
        follows = plan.target(p, plan.traces).simulated
        if theirs != {follows}:
            raise AlloctuneError(OptionText(
                "{path} holds replays named {older} that followed torch {theirs}'s allocator, and this sweep replays "
                "the trace as torch {follows}'s: going on would mix two torches in one group; give {pythons} "
                "{python} to go on as torch {theirs}, or start anew with {fresh=True}", path=path,
                older=older, theirs=", ".join(sorted(theirs)), follows=follows, python=p.python))
        plan.kept[p.env_id] = older


def _not_ours(path: Path) -> list[str]:
    """What a folder holds besides a lock file alloctune left (sorted names), when it is a folder."""
    return sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE) if path.is_dir() else []


def _made(folder: ResultsFolder, info: SweepInfo, held: contextlib.ExitStack) -> ResultsFolder:
    """`folder` made for this sweep, `info` written in it, its lock held in `held`. Where the sweep then stops
    before its first trial ends (refused, failed, interrupted), what it made goes again: a folder holding what was
    asked alone would be taken for results (`report` of the folder above) and holds nothing to lose. Anything else
    in it (a trace recorded) keeps it, and `report` passes it by."""
    made, up = [], folder.path   # the folders this makes, deepest first: the lock makes them
    while not os.path.lexists(up):
        made.append(up)
        up = up.parent

    def unmade(stopped: type[BaseException] | None, *_: object) -> None:   # once the lock (its file) is let go
        with contextlib.suppress(OSError):
            for path in made if stopped else ():
                path.rmdir()

    def unwritten(stopped: type[BaseException] | None, *_: object) -> None:   # while the lock is held
        left = {p.name for p in folder.path.iterdir()} - {LOCK_FILE}
        if stopped and not folder.has_trials() and left <= {SWEEP_FILE, TRIALS_FILE}:
            for name in left:
                (folder.path / name).unlink()

    held.push(unmade)
    _locked(folder, held)
    if (folder.path / SWEEP_FILE).exists():  # another sweep of this second finished already
        raise AlloctuneError(f"{folder.path} was created by another sweep a moment ago; run again")
    folder.write_info(info)
    held.push(unwritten)
    return folder


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
    """What makes two sweeps of the same files the same sweep (so the second resumes the first)."""
    return (info.workload_hash, info.grid, info.repeats, info.auto_repeats, info.confirm, info.budget_bytes,
            info.budget_fraction, info.backend, sorted(info.envs), (info.trace or {}).get("sha256"), info.search,
            info.finalists, info.check_growth)
