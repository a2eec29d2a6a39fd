"""The figures each reason quotes (decide/reasons.py pairs them with their codes): the numbers and settings a
reason's words need, as data. Settings are named by their canonical conf ('' = the default)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..results.figures import Comparison, Contamination, MemoryMeasure, SettingState
from ..settings.known import Feature, Severity
from .growth import Sample
from .order import TieRule


class Stop(str, enum.Enum):
    """Why the rounds stopped before their interval reached the goal."""

    FIXED_REPEATS = "fixed_repeats"   # --repeats N
    MAX_REPEATS = "max_repeats"
    TIME_BUDGET = "time_budget"       # or an interrupted sweep
    SETTLED = "settled"               # the sequential test accepted or refused (`rounds.sequential`)
    # blocks in one process, not rounds (decide/inprocess.py): why the alternation ended (results/alternation.py)
    JOB_ENDED = "job_ended"           # the job ended first
    MAX_PAIRS = "max_pairs"           # it ran the most pairs of blocks it is given
    MAX_SECONDS = "max_seconds"       # it ran for as long as it is given
    AGREED = "agreed"                 # another process of the job proposed the stop
    SWITCH_FAILED = "switch_failed"   # torch did not take a switch
    RESOLVED = "resolved"             # its stop rule's normal interval reached the target; Student's t is wider

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class NoFigures:
    """A reason that quotes nothing."""


@dataclass(frozen=True)
class DryRunCard:
    """The card a dry run stood for, the row of its table, and the values it made up, in all and by kind
    (results/provenance.py's `DryRun`; no kinds in a choice.json written before they were kept)."""

    card: str
    table: str
    made_up: int
    invented: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StateCount:
    state: SettingState
    count: int


@dataclass(frozen=True)
class NothingFits:
    budget_bytes: int | None
    settings: int
    states: tuple[StateCount, ...]   # by state name


@dataclass(frozen=True)
class Measure:
    measure: MemoryMeasure


@dataclass(frozen=True)
class Failed:
    state: SettingState
    failed: int                      # repeats that failed, of `repeats`
    repeats: int
    budget_bytes: int | None = None
    error: str | None = None         # the first failed repeat's error, last line


@dataclass(frozen=True)
class DefaultFailed:
    default: Failed
    winner: str
    measure: MemoryMeasure
    peak_bytes: int                  # the winner's
    fitting: int                     # settings that fit


@dataclass(frozen=True)
class KeepDefault:
    measure: MemoryMeasure
    tie: float
    default_bytes: int
    closest: str | None = None       # the lowest other setting allowed, if any
    closest_bytes: int | None = None


@dataclass(frozen=True)
class RefusedLower:
    refused: tuple[str, ...]         # each one's reason is its runner-up's


@dataclass(frozen=True)
class KnownProblem:
    """An entry of the table of known problems (settings/known.py) that applies to a setting on the choice's
    torch for the features the job used."""

    problem: str                     # the entry's id
    severity: Severity
    source: str                      # the public record it rests on
    torch_version: str | None        # the torch it was looked up for (None: unknown, every range counted)
    features: tuple[Feature, ...] = ()   # what the job used that it concerns (empty: whatever the job does)


@dataclass(frozen=True)
class GrowthCheck:
    """The growth check over one setting's repeats (decide/growth.py)."""

    repeats: int                     # repeats that recorded samples
    checked: int                     # ... with samples at k and 2k to compare
    growing: int                     # ... where reserved rose while allocated did not
    at_k: Sample | None = None       # the repeat with the largest rise of reserved: its samples at k and 2k
    at_2k: Sample | None = None


@dataclass(frozen=True)
class SavesMemory:
    measure: MemoryMeasure
    peak_bytes: int
    default_bytes: int
    reserved_ratio: float | None
    default_reserved_ratio: float | None
    small_gain: float | None = None  # the saving is under this fraction of the default's: keeping it is sound too


@dataclass(frozen=True)
class Retries:
    retries: int | None
    default_retries: int | None


@dataclass(frozen=True)
class Throughput:
    vs_default: Comparison
    median: float
    default_median: float
    unit: str | None
    default_unit: str | None
    max_slowdown: float
    negligible: float                # a difference under this is no practical difference


@dataclass(frozen=True)
class TieBreak:
    rule: TieRule
    winner_keys: int
    loser_keys: int
    loser_spread: float | None       # the loser's memory spread across repeats (None: not finite)
    # OUT_OF_TIE: the setting that needs less than the loser beyond the tie, its memory on the pair's measure, the tie
    beaten_by: str | None = None
    beaten_by_bytes: int | None = None
    tie: float | None = None


@dataclass(frozen=True)
class Tied:
    conf: str
    peak_bytes: int
    tie_break: TieBreak
    # What this pair compared (settings of one backend by peak reserved, of two by device memory); None in
    # choice.json written before pairs were compared so: the Ties' own.
    measure: MemoryMeasure | None = None
    winner_bytes: int | None = None


@dataclass(frozen=True)
class Ties:
    winner: str
    measure: MemoryMeasure
    winner_bytes: int
    tie: float
    tied: tuple[Tied, ...]


@dataclass(frozen=True)
class Unstable:
    spread: float | None             # max / min - 1 of peak reserved over the repeats (None: not finite)


@dataclass(frozen=True)
class ContaminatedSetting:
    conf: str
    repeats: tuple[Contamination, ...]
    used_bytes: int | None           # the lowest plausible figure of its other repeats (None: none left)


@dataclass(frozen=True)
class Contaminated:
    settings: tuple[ContaminatedSetting, ...]


@dataclass(frozen=True)
class Spread:
    conf: str
    spread: float | None             # max / min - 1 of its device figures (None: not finite)
    used_bytes: int                  # the lowest, the one used


@dataclass(frozen=True)
class DeviceSpread:
    settings: tuple[Spread, ...]
    agreement: float                 # repeats further apart than this are flagged


@dataclass(frozen=True)
class Unmeasured:
    """A setting the rounds left unmeasured because `winner`, not refused, needs less memory beyond the tie."""

    measure: MemoryMeasure
    peak_bytes: int
    winner: str
    winner_bytes: int
    tie: float
    predicted: bool                  # the figures are the replay's prediction (else measured once)


@dataclass(frozen=True)
class BackendSkipped:
    """A backend switch left unmeasured: `winner`'s peak reserved is within the tie of the program's peak requested
    bytes, which no allocator can hold less than."""

    winner: str
    winner_bytes: int
    requested_bytes: int
    tie: float
    predicted: bool


@dataclass(frozen=True)
class MoreMemory:
    measure: MemoryMeasure
    peak_bytes: int
    default_bytes: int


@dataclass(frozen=True)
class TooSlow:
    saved_bytes: int
    vs_default: Comparison
    max_slowdown: float


@dataclass(frozen=True)
class AgainstWinner:
    measure: MemoryMeasure
    peak_bytes: int
    winner_bytes: int
    vs_default: Comparison | None
    tie_break: TieBreak | None = None   # LOSES_TIE: the rule it lost on
    predicted_slowdown: float | None = None   # the speed plan's LOSES_TIE: its replay predicts it beyond the allowance
    max_slowdown: float | None = None


@dataclass(frozen=True)
class Precision:
    detectable: float | None          # the smallest slowdown the comparison could detect (interval half-width)
    rounds: int
    goal: float                       # the max slowdown: the half-width the rounds aim for
    stop: Stop | None = None          # PRECISION_SHORT: why the rounds stopped
    max_repeats: int | None = None
    rounds_needed: int | None = None  # PRECISION_SHORT from 2 rounds on: about how many would reach the goal


@dataclass(frozen=True)
class CardPeak:
    conf: str
    peak_bytes: int


@dataclass(frozen=True)
class WholeCard:
    measure: MemoryMeasure
    device_bytes: int
    settings: tuple[CardPeak, ...]   # by peak, lowest first
