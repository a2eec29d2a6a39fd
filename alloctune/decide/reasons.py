"""Reasons as data: why a setting won, why another did not, how precise the answer got. A reason is a code and its
figures (the numbers and settings it quotes), no words: `report/words.py` says them.

Settings are named by their canonical conf ('' = the default). choice.json keeps each reason beside its sentence
as `{"code": ..., "figures": {...}}` (`Reason.record`, `results.folder.ReasonRecord`); `Reason.from_record` reads
one back through the typed reader, the figures checked against the code's class.
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any, Union

from ..errors import ResultsError
from ..results.choices import ReasonRecord
from ..results.figures import Comparison, Contamination, MemoryMeasure, SettingState
from ..results.typed import from_json
from ..settings.known import Feature, Severity
from .growth import Sample
from .order import TieRule
from .speed import AsyncPlan, Confirmation, PredictedSpeed, Unpredictable


class Code(str, enum.Enum):
    """Every reason there is. The choice's reasons, in the order they are given: a caveat, the decision, then what
    supports or qualifies it; a runner-up's reason; the precision of the throughput comparison."""

    # the choice
    SIMULATED = "simulated"                   # caveat: decided by replay, on memory alone
    DRY_RUN = "dry_run"                       # caveat: decided by replaying a dry run's trace: nothing measured
    NOTHING_FITS = "nothing_fits"
    NO_DEFAULT = "no_default"                 # the default was not run in the group
    DEFAULT_FAILED = "default_failed"
    KEEP_DEFAULT = "keep_default"
    REFUSED_LOWER = "refused_lower"           # settings with less memory than the kept default were refused
    SAVES_MEMORY = "saves_memory"
    SIM_RETRIES = "sim_retries"               # a replay's winner needs no more retries than the default
    THROUGHPUT_UNCOMPARED = "throughput_uncompared"
    THROUGHPUT_UNTESTED = "throughput_untested"       # one repeat: no test
    THROUGHPUT_SAME = "throughput_same"               # no significant difference
    THROUGHPUT_NEGLIGIBLE = "throughput_negligible"   # detectable, but under NEGLIGIBLE
    THROUGHPUT_DIFFERS = "throughput_differs"
    DEVICE_MEMORY = "device_memory"           # memory compared as the driver's figure: backends differ
    DEVICE_CONTAMINATED = "device_contaminated"   # device figures far above what the trial holds: not used
    DEVICE_SPREAD = "device_spread"           # device figures moved between repeats: the lowest is used
    TIES = "ties"                             # settings that tied with the winner, and the rule that decided
    UNSTABLE = "unstable"                     # caution: the winner's peak moved between repeats
    WHOLE_CARD = "whole_card"                 # caveat: settings that fit only by taking (nearly) the whole card
    REFUSED_UNSAFE = "refused_unsafe"         # settings refused for a known problem or a growth (each one's reason)
    KNOWN_CAVEAT = "known_caveat"             # caution: the winner has a known problem that only warns
    GROWTH_STEADY = "growth_steady"           # the growth check found the winner's reserved memory steady
    GROWTH_UNDECIDED = "growth_undecided"     # caution: the growth check asked for could not compare two steps
    # a setting that may not be recommended (a runner-up's reason, or one of REFUSED_LOWER's)
    FAILED = "failed"
    MORE_MEMORY = "more_memory"
    MORE_RETRIES = "more_retries"
    TOO_SLOW = "too_slow"
    KNOWN_PROBLEM = "known_problem"           # a known problem that refuses, for the features the job used
    GROWING = "growing"                       # reserved kept rising while allocated did not (also: the default's caution)
    # a runner-up that may be recommended, against the winner
    LOSES_TIE = "loses_tie"
    COSTS_MORE = "costs_more"
    # why the rounds of a sweep did not measure a setting on the GPU (sweep.json's skipped list says it)
    LOSES_ON_MEMORY = "loses_on_memory"       # a candidate that was not refused needs less memory, beyond the tie
    BACKEND_SKIPPED = "backend_skipped"       # a backend switch cannot need less memory than the native winner
    # a hybrid sweep's speed plan (`confirm.py`): not measured, measured in rounds, the confirmation pair
    PREDICTED_TOO_SLOW = "predicted_too_slow"  # not measured: predicted slower than the allowance
    ASYNC_NOT_NEEDED = "async_not_needed"     # not measured: the replay's native winner meets the budget
    NOT_NEGLIGIBLE = "not_negligible"         # rounds: its predicted driver work could change a speed answer
    UNPREDICTED = "unpredicted"               # rounds: no prediction to go by
    ASYNC_MEASURED = "async_measured"         # rounds: cudaMallocAsync named, or no native setting meets the budget
    CONFIRMED = "confirmed"                   # the pair is consistent with the prediction
    DISAGREES = "disagrees"                   # the pair is beyond its noise from the prediction
    # how precise the throughput comparison got
    PRECISION_UNKNOWN = "precision_unknown"   # no interval: fewer than 2 rounds with both sides
    PRECISION_REACHED = "precision_reached"
    PRECISION_SHORT = "precision_short"

    def __str__(self) -> str:
        return self.value


class Stop(str, enum.Enum):
    """Why the rounds stopped before their interval reached the goal."""

    FIXED_REPEATS = "fixed_repeats"   # --repeats N
    MAX_REPEATS = "max_repeats"
    TIME_BUDGET = "time_budget"       # or an interrupted sweep
    SETTLED = "settled"               # the sequential test accepted or refused (`rounds.sequential`)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class NoFigures:
    """A reason that quotes nothing."""


@dataclass(frozen=True)
class DryRunCard:
    """The card a dry run stood for, the row of its table, and the values it made up (results/provenance.py)."""

    card: str
    table: str
    made_up: int


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


Figures = Union[NoFigures, DryRunCard, NothingFits, Measure, Failed, DefaultFailed, KeepDefault, RefusedLower, SavesMemory,
                Retries, Throughput, Ties, Unstable, Contaminated, DeviceSpread, Unmeasured, BackendSkipped,
                MoreMemory, TooSlow, AgainstWinner, Precision, WholeCard, KnownProblem, GrowthCheck, PredictedSpeed,
                Unpredictable, AsyncPlan, Confirmation]

FIGURES: dict[Code, type] = {
    Code.SIMULATED: NoFigures, Code.DRY_RUN: DryRunCard, Code.NOTHING_FITS: NothingFits, Code.NO_DEFAULT: Measure,
    Code.DEFAULT_FAILED: DefaultFailed, Code.KEEP_DEFAULT: KeepDefault, Code.REFUSED_LOWER: RefusedLower,
    Code.SAVES_MEMORY: SavesMemory, Code.SIM_RETRIES: Retries, Code.THROUGHPUT_UNCOMPARED: NoFigures,
    Code.THROUGHPUT_UNTESTED: Throughput, Code.THROUGHPUT_SAME: Throughput, Code.THROUGHPUT_NEGLIGIBLE: Throughput,
    Code.THROUGHPUT_DIFFERS: Throughput, Code.DEVICE_MEMORY: NoFigures, Code.DEVICE_CONTAMINATED: Contaminated,
    Code.DEVICE_SPREAD: DeviceSpread, Code.TIES: Ties, Code.UNSTABLE: Unstable,
    Code.LOSES_ON_MEMORY: Unmeasured, Code.BACKEND_SKIPPED: BackendSkipped,
    Code.REFUSED_UNSAFE: RefusedLower, Code.KNOWN_CAVEAT: KnownProblem, Code.GROWTH_STEADY: GrowthCheck,
    Code.GROWTH_UNDECIDED: GrowthCheck, Code.KNOWN_PROBLEM: KnownProblem, Code.GROWING: GrowthCheck,
    Code.FAILED: Failed, Code.MORE_MEMORY: MoreMemory, Code.MORE_RETRIES: Retries, Code.TOO_SLOW: TooSlow,
    Code.LOSES_TIE: AgainstWinner, Code.COSTS_MORE: AgainstWinner,
    Code.PRECISION_UNKNOWN: NoFigures, Code.PRECISION_REACHED: Precision, Code.PRECISION_SHORT: Precision,
    Code.WHOLE_CARD: WholeCard, Code.PREDICTED_TOO_SLOW: PredictedSpeed, Code.ASYNC_NOT_NEEDED: AsyncPlan,
    Code.NOT_NEGLIGIBLE: PredictedSpeed, Code.UNPREDICTED: Unpredictable, Code.ASYNC_MEASURED: AsyncPlan,
    Code.CONFIRMED: Confirmation, Code.DISAGREES: Confirmation,
}

# Figures a code's words rest on that its figures class leaves optional (for the other codes that share it): a
# record of the code without them is damage, refused where it is read (`Reason.from_record`), never a failed
# assertion where it is said.
NEEDED: dict[Code, tuple[str, ...]] = {
    Code.ASYNC_NOT_NEEDED: ("winner", "winner_bytes"),
    Code.PRECISION_REACHED: ("detectable",), Code.PRECISION_SHORT: ("detectable",),
    Code.GROWING: ("at_k", "at_2k"), Code.GROWTH_STEADY: ("at_k", "at_2k"),
}


@dataclass(frozen=True)
class Reason:
    code: Code
    figures: Figures = NoFigures()

    def __post_init__(self) -> None:
        if not isinstance(self.figures, FIGURES[self.code]):   # a programming error, never the data's
            raise TypeError(f"reason {self.code}: figures {type(self.figures).__name__}, expected "
                            f"{FIGURES[self.code].__name__}")

    def record(self) -> ReasonRecord:
        """As choice.json keeps it."""
        return ReasonRecord(self.code.value, _plain(asdict(self.figures)))

    @classmethod
    def from_record(cls, record: ReasonRecord, where: str = "reason") -> "Reason":
        try:
            code = Code(record.code)
        except ValueError:
            raise ResultsError(f"{where}: field 'code': expected a reason code, got {record.code!r}") from None
        figures: Figures = from_json(FIGURES[code], record.figures, f"{where}.figures")
        for name in NEEDED.get(code, ()):
            if getattr(figures, name) is None:
                raise ResultsError(f"{where}.figures: field {name!r}: the {code.value} reason needs it, got None")
        return cls(code, figures)


def _plain(value: Any) -> Any:
    """JSON's own types: enums by value, tuples as lists (so that a record read back equals the one written)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
