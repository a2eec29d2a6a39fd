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
from ..results.typed import from_json
from .quoted import (AgainstWinner, BackendSkipped, Contaminated, DefaultFailed, DeviceSpread, DryRunCard, Failed,
                     GrowthCheck, KeepDefault, KnownProblem, Measure, MoreMemory, NoFigures, NothingFits, Precision,
                     RefusedLower, Retries, SavesMemory, Throughput, Ties, TooSlow, Unmeasured, Unstable, WholeCard)
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
