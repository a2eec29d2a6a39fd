"""A fit's results folder: `fit.json` (what `alloctune fit` answered: the curves per setting, the largest value per
setting and limit, the recordings made to make answers exact, what the GPU said where it confirmed them, one value
at a time or copies at once), the traces it was fitted to (`trace.<param>-<value>.xz`) and `plot.png` (named as a
sweep's: `names.PLOT_FILE`). The records here are what --json prints and what the file holds, read back through the
typed reader before they are written.
"""
from __future__ import annotations

import contextlib
import enum
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ResultsError, shown
from ..files import write_file
from ..settings.conf import AllocConf
from .folder import ResultsFolder
from .names import FIT_FILE, LOCK_FILE, PLOT_FILE, SWEEP_FILE, TRIALS_FILE
from .provenance import DryRunSaid
from .records import Budget, Bytes, Conf, Count, TrialState, parsed
from .typed import checked_text, from_json, load_json
from .vocabulary import BASIS, SETTING, SIMULATED_TORCH, Basis, setting_name

# 2: an answer's need_bytes is the least room its value runs in (replay --min-memory's search, less a context), and
# its headroom the limit's room less that; schema 1 kept the peak reserved under the limit there, which a setting
# that keeps what it caches (max_split_size_mb) fills. 3: names as --json and the Python API give them: an answer's
# basis replayed or predicted (the curve's part under `curve`; schema 2 kept it in `basis`), no margin where nothing
# tested the curve (`margin_why`; schema 2 kept its error at two values, 0 give or take a rounding), and where the
# context came from (`overhead_from`; schema 2's `overhead_measured` said measured of a dry run's table). Older ones
# read through `_upgrade_1` and `_upgrade_2`, as results/upgrade.py does for choice.json.
FIT_SCHEMA = 3
# Why an answer the curve decided carries no margin: with two values a line meets both, and nothing tests it.
UNTESTED = "too few values for a leave-one-out: nothing tested the curve"


@dataclass(frozen=True)
class CurveRecord:
    """Peak bytes as a polynomial in the value (highest power first), its error at the recorded points and its
    leave-one-out error, relative (None: too few points); `loo_weak`: too few points for the leave-one-out to test
    much."""

    coefficients: list[float]
    max_error: float
    loo_error: float | None
    points: Count
    loo_weak: bool
    loo_worst: int | None = None   # the value the leave-one-out missed most

    @property
    def margin(self) -> float:
        """What a value the curve decides must fit with on top (decide/fit.Fit.margin)."""
        return self.loo_error if self.loo_error is not None else self.max_error


@dataclass(frozen=True)
class PointRecord:
    """A setting at one recorded value: its peaks replayed without a memory limit (what the curves are fitted to;
    --json names them `UNLIMITED_PEAKS`), and the least room it runs in without an OOM and without an alloc retry
    (sim/points.Replayed; None: a fit.json from before it was kept, or none found)."""

    value: int
    peak_reserved_bytes: Bytes
    peak_allocated_bytes: Bytes
    least_room_bytes: Bytes | None = None


# fit --json's names of a point's peaks: replayed without a memory limit, they are not what replay prints for a card
UNLIMITED_PEAKS = {"peak_reserved_bytes": "unlimited_peak_reserved_bytes",
                   "peak_allocated_bytes": "unlimited_peak_allocated_bytes"}


@dataclass(frozen=True)
class SettingFit:
    """One setting's curves; `reason` instead where it is not simulated."""

    conf: Conf
    points: list[PointRecord] = field(default_factory=list)
    reserved: CurveRecord | None = None
    allocated: CurveRecord | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Answer:
    """One setting under one limit: the largest value that runs (None: none does), what its figures rest on
    (`answer_basis`: replayed, or predicted with the curve's part, decide/fit.Basis's interpolated or extrapolated,
    in `curve`), what it needs there (decide/fit.Largest.need_bytes) and the headroom the limit leaves it, the
    value to confirm that the next one does not run, and per recorded value whether its replay ran and how many
    copies fit at once (decide/fit.copies). `exact`: the value and the next one were both recorded, and their
    replays decide (decide/fit.Largest.exact); else the curve decided with `margin` (relative) on top, or none
    where nothing tested the curve (`margin_why`)."""

    conf: Conf
    largest: int | None
    basis: Basis
    need_bytes: Bytes | None
    headroom_bytes: int | None
    next_value: int
    capped: bool
    runs: list[bool]
    copies: list[Count]
    exact: bool = False
    margin: float | None = None
    curve: str | None = None
    margin_why: str | None = None

    @property
    def setting(self) -> AllocConf:
        return parsed(self.conf)


def answer_basis(decided: str | None, exact: bool) -> tuple[Basis, str | None]:
    """What an answer's figures rest on, and the curve's part where a curve decided, from decide/fit.Basis's value
    (None where no value fits): replayed where the replay of its value decides (with none, of the next value, where
    exact), else predicted."""
    if decided is None:
        return (Basis.REPLAYED if exact else Basis.PREDICTED), None
    return (Basis.REPLAYED, None) if decided == Basis.REPLAYED.value else (Basis.PREDICTED, decided)


@dataclass(frozen=True)
class Confirmation:
    """A value run on the GPU under a budget: what the answer predicted and what the trial did; `searched`: a run
    past the two that check an answer (decide/fit.search_next)."""

    conf: Conf
    value: int
    predicted_runs: bool
    state: str                       # the trial's TrialState
    runs: bool                       # OK, without an OOM and without an alloc retry
    peak_reserved_bytes: Bytes | None = None
    num_alloc_retries: Count | None = None
    error: str | None = None
    searched: bool = False           # run to find the largest value after a check disagreed, not a check

    @property
    def said(self) -> bool | None:
        """What the run says of memory: it ran, it did not (an OOM, an alloc retry), or nothing (it crashed, timed
        out or ran under other settings)."""
        return self.runs if self.state in (TrialState.OK.value, TrialState.OOM.value) else None

    @property
    def agreed(self) -> bool | None:
        return None if self.said is None else self.predicted_runs == self.said


@dataclass(frozen=True)
class CopyRun:
    """One of the copies run together: its trial's state (TrialState) and what it measured."""

    state: str
    runs: bool                       # OK, without an OOM and without an alloc retry
    peak_reserved_bytes: Bytes | None = None
    num_alloc_retries: Count | None = None
    error: str | None = None


@dataclass(frozen=True)
class CopiesConfirmation:
    """Copies of the job at one recorded value started together on the GPU under a budget: how many were predicted
    to fit at once (`Answer.copies`: the budget and one context shared among them, each copy its least room and its
    context), the GPU memory left free for them (the rest held by another process), and each copy's run.
    `runs` empty: none were run, `error` says why."""

    conf: Conf
    value: int
    predicted: Count
    free_bytes: Bytes | None
    runs: list[CopyRun] = field(default_factory=list)
    error: str | None = None

    @property
    def said(self) -> bool | None:
        """They all ran (True), one ran out of memory or retried an allocation (False), or nothing of memory was
        said (a copy crashed or timed out and none ran out)."""
        if not self.runs:
            return None
        if all(r.runs for r in self.runs):
            return True
        if any(r.state == TrialState.OOM.value or (r.state == TrialState.OK.value and not r.runs) for r in self.runs):
            return False
        return None

    @property
    def agreed(self) -> bool | None:
        return self.said   # the prediction: they all fit


@dataclass(frozen=True)
class LimitFit:
    """The answers under one limit: a card (`device_bytes`), or a budget (as given, and in bytes) on the recording
    GPU; `capacity_bytes` is the peak reserved it leaves a job."""

    device_bytes: Bytes
    capacity_bytes: Bytes
    answers: list[Answer]
    budget: str | None = None
    budget_bytes: Budget | None = None
    confirmed: list[Confirmation] = field(default_factory=list)
    copies_confirmed: list[CopiesConfirmation] = field(default_factory=list)


class OverheadFrom(str, enum.Enum):
    """Where a fit's CUDA context per process came from."""

    MEASURED = "measured"   # the recordings measured it
    TABLE = "table"         # the dry runs' traces hold the card's, from their table: nothing measured
    GIVEN = "given"         # --overhead
    ASSUMED = "assumed"     # the recordings do not say: the simulator's default

    @classmethod
    def of(cls, given: bool, measured: bool, dry_run: bool) -> "OverheadFrom":
        """Given with --overhead, else assumed where no trace holds one, else the dry runs' table or measured."""
        return cls.GIVEN if given else cls.ASSUMED if not measured else cls.TABLE if dry_run else cls.MEASURED


class NotExact(str, enum.Enum):
    """Why no recording was made to make answers exact."""

    TRACES = "traces"     # fitted to traces recorded before: no command to record
    NO_GPU = "no-gpu"     # a command, but no GPU its interpreter sees
    NONE = "none"         # no recording allowed past the values given (--extra-recordings 0)


@dataclass(frozen=True)
class Unrecorded:
    """A value a recording was tried at to make answers exact, which left no trace, and why."""

    value: int
    why: str


@dataclass(frozen=True)
class ExactRecord:
    """The recordings made past the values given to make answers exact: at most `most`; `values` as made (they are
    among the fit's values too); `failed`, tried without a trace; `beyond`, needed but predicted beyond the recording
    GPU, so not tried; `not_run`, why none was tried at all."""

    most: Count
    values: list[int] = field(default_factory=list)
    failed: list[Unrecorded] = field(default_factory=list)
    beyond: list[int] = field(default_factory=list)
    not_run: NotExact | None = None


@dataclass
class FitFile:
    """What `alloctune fit` answered."""

    param: str
    values: list[int]
    step: int
    traces: list[str]                 # one per value, in order
    overhead_bytes: Bytes             # the CUDA context each process holds outside the allocator
    overhead_from: OverheadFrom       # ... and where that came from
    recording_device_bytes: Bytes
    settings: list[SettingFit]
    limits: list[LimitFit]
    command: list[str] | None = None  # the command, with {param} where the value went
    warnings: list[str] = field(default_factory=list)
    exact: ExactRecord | None = None  # the recordings made to make answers exact (None: a fit from before them)
    dry_run: DryRunSaid | None = None  # the traces are dry runs for this card (None: recordings made on a GPU)
    schema: int = FIT_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, where: str = FIT_FILE) -> "FitFile":
        if isinstance(data, dict):
            if data.get("schema") == 1:
                data = _upgrade_1(data)
            if data.get("schema") == 2:
                data = _upgrade_2(data)
            if data.get("schema", FIT_SCHEMA) != FIT_SCHEMA:   # before its fields, which another schema names apart
                raise ResultsError(f"{where}: schema {shown(data['schema'])} is not one this alloctune reads "
                                   f"({FIT_SCHEMA})")
        return from_json(cls, data, where)

    def shared_json(self, simulated_torch: str) -> dict[str, Any]:
        """As `fit --json` prints it: the stored form under the names every command shares (results/vocabulary.py):
        a setting named 'default', never ''; each point's peaks named for what they are (`UNLIMITED_PEAKS`); the
        GPU's runs measured; the torch the replays followed. fit.json keeps its stored names."""
        data = self.to_json()
        for setting in data["settings"]:
            setting[SETTING] = setting_name(setting[SETTING])
            setting["points"] = [{UNLIMITED_PEAKS.get(k, k): v for k, v in p.items()} for p in setting["points"]]
        for limit in data["limits"]:
            for row in limit["answers"]:
                row[SETTING] = setting_name(row[SETTING])
            for row in limit["confirmed"] + limit["copies_confirmed"]:
                row.update({SETTING: setting_name(row[SETTING]), BASIS: Basis.MEASURED.value})
        return dict(data, **{SIMULATED_TORCH: simulated_torch})

    def write(self, folder: str | Path) -> Path:
        """fit.json in `folder`, refused before it is written if it would not read back."""
        path = Path(folder) / FIT_FILE
        write_file(path, checked_text(self.to_json(), FitFile.from_json, str(path), indent=2) + "\n")
        return path


# What a fit writes in its folder besides fit.json and plot.png: its recordings (names.fit_trace), and where one's
# trace could not be read, the raw snapshot kept beside it (trial/recording.py); hidden names are temporary files and
# the lock.
_FIT_NAMES = re.compile(r"trace\.[A-Za-z_][A-Za-z0-9_]*-[0-9]+\.xz(\.raw\.pickle)?")


def foreign(folder: Path, param: str, command: list[str] | None) -> str | None:
    """Why `folder` cannot hold this fit (None: it can: missing, empty, or this fit's own): not a folder, a sweep's
    results folder (whose plot.png a fit would replace), files a fit does not write, or the fit of another command
    or parameter (whose recordings this one would answer from)."""
    if not folder.exists():
        return None
    if not folder.is_dir():
        return "is not a folder"
    names = sorted(os.listdir(folder))
    if SWEEP_FILE in names or TRIALS_FILE in names:
        return f"is a sweep's results folder ({SWEEP_FILE if SWEEP_FILE in names else TRIALS_FILE}): a fit keeps " \
               f"its own folder"
    if others := [n for n in names if not (n.startswith(".") or n in (FIT_FILE, PLOT_FILE) or _FIT_NAMES.fullmatch(n))]:
        return f"holds files a fit does not write ({shown(others[0])}{', ...' if len(others) > 1 else ''})"
    if FIT_FILE in names:
        fit = FitFile.from_json(load_json(folder / FIT_FILE), str(folder / FIT_FILE))
        if (fit.param, fit.command) != (param, command):
            what = "traces recorded before" if fit.command is None else shown(" ".join(fit.command), 60)
            return f"holds the fit of another command or parameter ({fit.param}: {what})"
    return None


@contextlib.contextmanager
def claimed(folder: Path, param: str, command: list[str] | None) -> Iterator[Path]:
    """`folder` held for one fit: refused (one ResultsError line) where `foreign` finds a reason, before it is
    created and again once its writer lock is held (`folder.ResultsFolder.lock`: a second fit into it at once is
    refused); created where missing, and removed again, with the folders created for it, where the fit ends by an
    error having written nothing there."""
    def refuse() -> None:
        if why := foreign(folder, param, command):
            raise ResultsError(f"{folder} {why}: give the fit another folder")

    refuse()
    created = next((p for p in reversed([folder, *folder.parents]) if not p.exists()), None)
    holder = ResultsFolder(folder)
    with holder.lock():
        try:
            refuse()
            yield folder
        except BaseException:
            if created is not None and os.listdir(folder) == [LOCK_FILE]:
                _remove(folder, created)   # the lock file with it, while held: nobody else can hold it
            raise


def _remove(folder: Path, created: Path) -> None:
    """`folder` and its parents up to `created` (the first this process made), while they hold nothing else."""
    with contextlib.suppress(OSError):
        (folder / LOCK_FILE).unlink()
        for path in [folder, *folder.parents]:
            path.rmdir()
            if path == created:
                break


def _upgrade_1(data: dict) -> dict:
    """A schema 1 fit.json as schema 2 reads it: what an answer needed and its headroom are not known in schema 2's
    sense (schema 1 kept the peak under the limit), so none; everything else means what it meant."""
    return dict(data, schema=2, limits=_answers(data, lambda a: dict(a, need_bytes=None, headroom_bytes=None)))


def _upgrade_2(data: dict) -> dict:
    """A schema 2 fit.json as schema 3 reads it: each answer's basis in the shared vocabulary and the curve's part
    apart (`answer_basis`); no margin where the setting's curve had no leave-one-out (`UNTESTED`); the context
    measured where it was, the dry run's table's where the traces are a dry run's, else assumed."""
    settings = data["settings"] if isinstance(data.get("settings"), list) else []
    untested = {s.get("conf") for s in settings if isinstance(s, dict) and isinstance(s.get("reserved"), dict)
                and s["reserved"].get("loo_error") is None}

    def answer(a: dict) -> dict:
        if not (a.get("basis") is None or isinstance(a.get("basis"), str)):
            return a   # damage: the typed reader says where
        basis, curve = answer_basis(a.get("basis"), a.get("exact") is True)
        bare = a.get("exact") is not True and a.get("conf") in untested
        return dict(a, basis=basis.value, curve=curve, **({"margin": None, "margin_why": UNTESTED} if bare else {}))

    measured = data.get("overhead_measured")
    source = OverheadFrom.of(False, measured is True, data.get("dry_run") is not None)
    return dict(data, schema=3, limits=_answers(data, answer), overhead_from=source.value)


def _answers(data: dict, change: Callable[[dict], dict]) -> object:
    """`data`'s limits with `change` made to each answer; what is not of a fit.json's shape left for the typed
    reader to refuse."""
    limits = data.get("limits")
    if not isinstance(limits, list):
        return limits
    return [dict(limit, answers=[change(a) if isinstance(a, dict) else a for a in limit["answers"]])
            if isinstance(limit, dict) and isinstance(limit.get("answers"), list) else limit for limit in limits]
