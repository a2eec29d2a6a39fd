"""A results folder: what a sweep asked for (`sweep.json`), what it measured (`trials.jsonl`) and what it
decided (`choice.json`, written only once the sweep finished).

    results/<workload>-<YYYYmmdd-HHMMSS>/
        sweep.json  trials.jsonl  choice.json  summary.md  best.env  plot.png

What a decision writes (choice.json, summary.md, plot.png, best.env) changes together or not at all
(`ResultsFolder.together`, `batch.py`).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import FolderBusy, ResultsError
from ..files import checked_path, not_a_file, read_text, write_file
from ..settings.conf import AllocConf, canonical
from ..units import plural
from .choices import ChoiceFile, ChoiceRecord, ReasonRecord
from .records import Backend, Budget, Conf, TrialRecord, parsed
from .names import BEST_FILE, CHOICE_FILE, LOCK_FILE, PLOT_FILE, SUMMARY_FILE, SWEEP_FILE, TRIALS_FILE
from .trials import TrialStore
from . import batch
from .typed import checked_text, from_json, load_json
from .upgrade import upgraded

# Where a sweep creates its folder unless told: a folder of the user's own in the current one, named for the tool,
# so that a user's sweeps never mix with anything else there (this repository's committed results/, for one).
DEFAULT_RESULTS_ROOT = "alloctune-results"
# sweep.json's; readers refuse any other (choice.json's is `choices.CHOICE_SCHEMA`, older ones upgraded on reading)
SWEEP_SCHEMA = 1
# What a decision writes, together or not at all (`ResultsFolder.together`): the only files a batch may change.
DECIDED = (CHOICE_FILE, SUMMARY_FILE, PLOT_FILE, BEST_FILE)
MAX_ENV_BYTES = 64 * 2**10   # best.env: a comment and a line, some hundred bytes
# What a results folder without trials is, as a reader that passes it by says (`find_results`).
NO_TRIALS = "a sweep that stopped before its first trial ended"


def passed_by(folder: "ResultsFolder", left: str) -> str:
    """The line for a folder without trials that a command over a folder of results folders left out ('not
    reported', 'not exported')."""
    return f"{folder.path} holds no trials ({NO_TRIALS}): {left}"
_LOCK_OPEN = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW


@dataclass(frozen=True)
class Skipped:
    """A grid setting that was not run, and why: a rule of the settings (invalid for that torch, pointless, a known
    upstream bug) in its own words, or a decision of the sweep's rounds (memory left it unmeasured) as data."""

    conf: str
    reason: str = ""             # the settings rule's text; "" where `why` holds the decision
    env_id: str | None = None
    problem: str | None = None   # the known problem's id (settings/known.py) where one skipped it
    source: str | None = None    # ... and the public record it rests on
    # A decision as data (decide/reasons.py; report/words.skipped_words says it). A sweep.json from before kept it
    # as a sentence in `reason`, which is shown as it is.
    why: ReasonRecord | None = None

    def __post_init__(self) -> None:   # canonical once, as read: a setting that does not parse is kept as written
        object.__setattr__(self, "conf", canonical(self.conf))


@dataclass(frozen=True)
class FileStamp:
    """A file the sweep's command names (its script), as it was when the sweep began: the same sweep asked again after
    it changed starts anew (sweeper/resume.py)."""

    path: str                   # absolute
    size: int
    mtime_ns: int
    sha256: str | None = None   # None: too large to read at every start, known by its size and time alone


@dataclass
class SweepInfo:
    """What a sweep asked for: the frozen spec, kept apart from the samples."""

    workload_name: str
    workload_hash: str
    workload: dict[str, Any]          # WorkloadSpec.to_dict()
    grid: list[Conf]                  # canonical settings that were run ('' = default)
    skipped: list[Skipped] = field(default_factory=list)
    envs: dict[str, dict[str, Any]] = field(default_factory=dict)  # env_id -> probe facts (python, torch, ...)
    repeats: int = 1                  # fixed repeats, or with auto_repeats the most rounds (--max-repeats)
    auto_repeats: bool = False        # --repeats auto: rounds until each answer is known (rounds.py)
    # --repeats confirm, a hybrid sweep's default: speed predicted from each replay's driver calls and confirmed by
    # one paired GPU run, rounds (as auto_repeats, which it also sets) only where the prediction cannot answer
    # (decide/confirm.py)
    confirm: bool = False
    time_budget_s: float | None = None
    budget_bytes: Budget | None = None
    budget_fraction: float | None = None
    backend: Backend = Backend.CUDA   # CUDA, SIM or HYBRID (an AUTO request is resolved before it is recorded)
    trace: dict[str, Any] | None = None  # replayed: {path, sha256} (`trace_paths`); another trace, another sweep
    search: int | None = None         # --search: the most settings replayed per interpreter (else the grid)
    finalists: int | None = None      # hybrid: best simulated settings measured beside the default (None: 3)
    # What the sweep was asked (the decision's parameter, decide/parameters.py). None: a folder from before it was
    # kept, which the default decided.
    max_slowdown: float | None = None
    check_growth: int | None = None   # --check-growth K: each measured trial sampled memory at steps K and 2K
    # The sweep ran to its end: False from its start (and a resume's) until then, so a decision taken from an
    # interrupted sweep says so even where no trial count was planned (--repeats auto, hybrid, search). None: a
    # folder from before this was kept, taken as finished, as it was then.
    finished: bool | None = None
    # The files its command names (`FileStamp`); None: a folder from before they were kept, whose files' changes
    # cannot be told.
    files: list[FileStamp] | None = None
    command: str = ""
    created_at: str = ""
    alloctune_version: str = ""
    schema: int = SWEEP_SCHEMA

    def __post_init__(self) -> None:
        self.backend = Backend(self.backend)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def workload_label(self) -> str:
        """The workload and its preset, as a results folder's name starts (two presets of one workload are different
        sweeps)."""
        preset = self.workload.get("preset")
        return f"{self.workload_name}-{preset}" if preset else self.workload_name

    @property
    def settings(self) -> list[AllocConf]:
        """The grid's settings, parsed when the file was read (`records.parsed`)."""
        return [parsed(c) for c in self.grid]

    def skipped_as(self, conf: str, env_id: str) -> Skipped | None:
        """This sweep's entry for not running `conf` (canonical) for `env_id`, or None where it did not skip it."""
        for skipped in self.skipped:
            if skipped.env_id in (None, env_id) and skipped.conf == conf:
                return skipped
        return None

    @property
    def trace_paths(self) -> list[str]:
        """The traces the sweep replays: `trace.paths`, one per process, where a hybrid sweep recorded a command of
        several; else `trace.path`, the one trace (every folder from before several were kept)."""
        return _trace_paths(self.trace or {}, SWEEP_FILE)

    @classmethod
    def from_json(cls, data: object, where: str = SWEEP_FILE) -> "SweepInfo":
        info = from_json(cls, data, where)
        # as --max-slowdown accepts; outside it the statistics break
        if info.max_slowdown is not None and not 0 <= info.max_slowdown < 1:
            raise ResultsError(f"{where}: field 'max_slowdown': expected a fraction in [0, 1), "
                               f"got {info.max_slowdown!r}")
        _trace_paths(info.trace or {}, where)
        return info


def _trace_paths(trace: dict[str, Any], where: str) -> list[str]:
    paths = trace.get("paths") or ([trace["path"]] if trace.get("path") else [])
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ResultsError(f"{where}: field 'trace': expected the path of each trace, got {paths!r}")
    return paths


def sweep_text(info: SweepInfo, where: str = SWEEP_FILE) -> str:
    """sweep.json's text for `info`, once read back as `ResultsFolder.info` reads it (ResultsError for a value it
    would refuse): a sweep checks it before it creates its folder."""
    return _json_text(info.to_json(), SweepInfo.from_json, where)


def _json_text(data: dict[str, Any], read: Callable[[Any, str], object], where: str) -> str:
    return checked_text(data, read, where, indent=2, sort_keys=True) + "\n"


def _load(path: Path, what: str) -> Any:
    try:
        return load_json(path)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no {what} here") from None


def _read_sweep(path: Path) -> dict[str, Any]:
    data = _load(path, f"sweep description ({SWEEP_FILE})")
    if not isinstance(data, dict) or data.get("schema") != SWEEP_SCHEMA:
        version = data.get("schema") if isinstance(data, dict) else None
        raise ResultsError(f"{path}: sweep description ({SWEEP_FILE}) schema version {version!r}; this alloctune "
                           f"reads {SWEEP_SCHEMA}")
    return data


class ResultsFolder:
    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.store = TrialStore(self.path / TRIALS_FILE)
        self._lock_fd: int | None = None
        self._batch: dict[str, bool] | None = None   # in `together`: name -> written (True) or removed (False)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder's writer lock (`flock` on LOCK_FILE, which exists only while it is held: its holder
        removes it as it lets go): one sweep or report writes a folder at a time. Re-entrant on this object;
        another holder (another sweep, in any process) is a ResultsError at once: two sweeps into one folder would
        record every trial twice."""
        if self._lock_fd is not None:
            yield
            return
        self.path.mkdir(parents=True, exist_ok=True)
        fd = self._take_lock()
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd
        try:
            yield
        finally:
            self._lock_fd = None
            # Removed while still held: whoever opened it meanwhile finds, once it has the lock, that the name no
            # longer leads to it, and takes the lock again on a new file (`_take_lock`).
            with contextlib.suppress(OSError):
                os.unlink(self.path / LOCK_FILE)
            os.close(fd)  # releases the lock

    def _take_lock(self) -> int:
        """LOCK_FILE opened (created where missing) and locked: the descriptor. Taken again where its holder removed
        it between the open and the lock, so that the lock held is always on the file the name leads to."""
        path = self.path / LOCK_FILE
        while True:
            try:
                fd = os.open(path, _LOCK_OPEN | os.O_CREAT, 0o644)
            except OSError:
                if path.is_symlink():   # it is truncated and written: never through a link
                    raise ResultsError(f"{path} is a symbolic link, which alloctune would write through: "
                                       f"remove it") from None
                raise
            if problem := not_a_file(path, os.fstat(fd).st_mode):   # flock on one: 'Invalid argument'
                os.close(fd)
                raise ResultsError(f"{path}, the folder's writer lock, {problem}: remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                raise FolderBusy(f"{self.path} is being written by another alloctune sweep or report"
                                 f"{f' (pid {holder})' if holder.isdigit() else ''}; wait for it to finish") from None
            try:
                if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def write_info(self, info: SweepInfo) -> None:
        path = self.path / SWEEP_FILE
        write_file(path, sweep_text(info, str(path)))

    def info(self) -> SweepInfo:
        if not self.path.is_dir():
            raise ResultsError(f"{self.path}: not a results folder (no such directory)")
        path = self.path / SWEEP_FILE
        return SweepInfo.from_json(_read_sweep(path), str(path))

    def trials(self) -> list[TrialRecord]:
        return self.store.load()

    def has_trials(self) -> bool:
        """Whether the trials file holds anything (read as `trials` reads it only when asked): a folder without is a
        sweep that stopped before its first trial ended."""
        path = self.store.path
        return path.is_file() and path.stat().st_size > 0

    def recorded_trials(self) -> list[TrialRecord]:
        """The trials a decision rests on: a ResultsError where there are none (trials.jsonl missing or empty), as a
        decision from no trial would replace the one the folder holds with nothing."""
        if not (trials := self.trials()):
            state = "is empty" if self.store.path.exists() else "is missing"
            raise ResultsError(f"{self.store.path} {state}: no trial to decide from; nothing was changed")
        return trials

    def best_env(self) -> str:
        """best.env's text, "" where there is none or it cannot be read as one (not a regular file, larger than
        MAX_ENV_BYTES, not UTF-8): a report rewrites it."""
        try:
            return read_text(self.path / BEST_FILE, MAX_ENV_BYTES, "an env file", ResultsError, regular=True)
        except (OSError, ResultsError):
            return ""

    def write_choice(self, choices: Iterable[ChoiceRecord]) -> None:
        path = self.path / CHOICE_FILE
        write_file(self.file(CHOICE_FILE), _json_text(ChoiceFile(tuple(choices)).to_json(), _read_choices, str(path)))

    def file(self, name: str) -> Path:
        """Where to write the folder's file `name`: in `together` (one of DECIDED), its staged name, renamed into
        place at the end."""
        if self._batch is None:
            return self.path / name
        _decided(name)
        self._batch[name] = True
        return batch.staged(self.path, name)

    def remove(self, name: str) -> None:
        """Remove the folder's file `name` (in `together`: with the rest of the batch)."""
        if self._batch is None:
            (self.path / name).unlink(missing_ok=True)
        else:
            self._batch[_decided(name)] = False

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """The files written (`file`) and removed (`remove`) inside change together or not at all (`batch.py`).
        With the writer lock held."""
        with self.lock():
            self.settle()
            self._batch = {}
            try:
                yield
            except BaseException:
                batch.discard(self.path, list(self._batch))
                raise
            finally:
                done, self._batch = self._batch, None
            written = sorted((n for n, w in done.items() if w), key=lambda n: n == CHOICE_FILE)   # choice.json last
            batch.commit(self.path, written, [n for n, w in done.items() if not w])

    def settle(self) -> None:
        """With the writer lock held: a decision a killed process left half written finished, or dropped."""
        batch.settle(self.path, DECIDED)

    def has_choice(self) -> bool:
        """Whether the sweep finished a choice (choice.json exists; `choices()` reads and checks it)."""
        return (self.path / CHOICE_FILE).exists()

    def choices(self) -> list[ChoiceRecord]:
        """The decisions (one per environment and backend); refuses a sweep that did not finish. Read as they are
        in place, changing nothing: a batch a killed writer left half in place still has the old choice.json (its
        last rename), which the next writer replaces (`settle`)."""
        path = self.path / CHOICE_FILE
        if not self.has_choice():
            raise ResultsError(f"{self.path}: this sweep has not finished a choice (no {CHOICE_FILE}); "
                               f"run the sweep again to resume it")
        return list(_read_choices(_load(path, "choice"), str(path)).choices)


def _decided(name: str) -> str:
    if name not in DECIDED:   # a programming error: a batch changes only what a decision writes
        raise ValueError(f"{name} is not a file a decision writes ({', '.join(DECIDED)})")
    return name


def _read_choices(data: object, where: str) -> ChoiceFile:
    """choice.json's parsed `data` as records, a file of an older schema upgraded first (`upgrade.py`)."""
    return from_json(ChoiceFile, upgraded(data, where), where)


def find_results(path: str | os.PathLike | ResultsFolder,
                 empty: list[ResultsFolder] | None = None) -> list[ResultsFolder]:
    """A results folder itself (a ResultsFolder, as `sweep()` returns in its outcome, or its path), or every results
    folder directly below `path` that holds trials (sorted by name). Those below that hold none (`NO_TRIALS`) are
    left out, and added to `empty` where given for the caller to name; a folder of only such is a ResultsError."""
    if isinstance(path, ResultsFolder):   # itself: the lock it may hold is the object's
        return [path]
    if checked_path(path, "a results folder") == "-":
        raise ResultsError("'-' (standard input) cannot be a results folder: give its path")
    path = Path(path)
    if (path / SWEEP_FILE).exists():
        return [ResultsFolder(path)]
    found = [ResultsFolder(p) for p in sorted(path.iterdir()) if (p / SWEEP_FILE).exists()] if path.is_dir() else []
    if not found:
        raise ResultsError(f"{path}: no results folder here (expected {SWEEP_FILE})")
    held = [f for f in found if f.has_trials()]
    if not held:
        raise ResultsError(f"{path}: no results folder here holds trials ({', '.join(f.path.name for f in found)}: "
                           f"each {NO_TRIALS})")
    if empty is not None:
        empty.extend(f for f in found if f not in held)
    return held


def results_folder(path: str | os.PathLike | ResultsFolder) -> ResultsFolder:
    """The one results folder `path` is (a ResultsFolder or its path), for what works on one folder
    (`alloctune.analyze`): a folder of several is refused, naming them."""
    found = find_results(path)
    if len(found) > 1:
        raise ResultsError(f"{found[0].path.parent} holds {plural(len(found), 'results folder')}; give one of them: "
                           + ", ".join(f.path.name for f in found))
    return found[0]
