"""A fit's results folder: `fit.json` (what `alloctune fit` answered: the curves per setting, the largest value per
setting and limit, what the GPU said where it confirmed them), the traces it was fitted to (`trace.<param>-<value>.xz`)
and `plot.png` (named as a sweep's: `names.PLOT_FILE`). The records here are what --json prints and what the file
holds, read back through the typed reader before they are written.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ResultsError
from ..files import write_file
from ..settings.conf import AllocConf
from .names import FIT_FILE
from .records import Budget, Bytes, Conf, Count, TrialState, parsed
from .typed import checked_text, from_json

FIT_SCHEMA = 1


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


@dataclass(frozen=True)
class PointRecord:
    """A setting's replayed peaks at one recorded value, without a limit."""

    value: int
    peak_reserved_bytes: Bytes
    peak_allocated_bytes: Bytes


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
    """One setting under one limit: the largest value that runs (None: none does), what it rests on
    (decide/fit.Basis), the peak reserved there and the headroom it leaves, the value to confirm that the next one
    does not run, and per recorded value whether its replay ran and how many copies fit at once."""

    conf: Conf
    largest: int | None
    basis: str | None
    need_bytes: Bytes | None
    headroom_bytes: int | None
    next_value: int
    capped: bool
    runs: list[bool]
    copies: list[Count]

    @property
    def setting(self) -> AllocConf:
        return parsed(self.conf)


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
class LimitFit:
    """The answers under one limit: a card (`device_bytes`), or a budget (as given, and in bytes) on the recording
    GPU; `capacity_bytes` is the peak reserved it leaves a job."""

    device_bytes: Bytes
    capacity_bytes: Bytes
    answers: list[Answer]
    budget: str | None = None
    budget_bytes: Budget | None = None
    confirmed: list[Confirmation] = field(default_factory=list)


@dataclass
class FitFile:
    """What `alloctune fit` answered."""

    param: str
    values: list[int]
    step: int
    traces: list[str]                 # one per value, in order
    overhead_bytes: Bytes             # the CUDA context each process holds outside the allocator
    overhead_measured: bool           # ... as the recordings measured it (else the simulator's default)
    recording_device_bytes: Bytes
    settings: list[SettingFit]
    limits: list[LimitFit]
    command: list[str] | None = None  # the command, with {param} where the value went
    warnings: list[str] = field(default_factory=list)
    schema: int = FIT_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, where: str = FIT_FILE) -> "FitFile":
        fit = from_json(cls, data, where)
        if fit.schema != FIT_SCHEMA:
            raise ResultsError(f"{where}: schema {fit.schema} is not one this alloctune reads ({FIT_SCHEMA})")
        return fit

    def write(self, folder: str | Path) -> Path:
        """fit.json in `folder`, refused before it is written if it would not read back."""
        path = Path(folder) / FIT_FILE
        write_file(path, checked_text(self.to_json(), FitFile.from_json, str(path), indent=2) + "\n")
        return path
