"""choice.json's records: one decision per (environment, backend, budget) as its consumers (export, compare,
report) read it, the reasons in it as data, and how far an interrupted sweep got. The folder (`folder.py`) reads
and writes the file; these are its contents."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..settings.conf import AllocConf
from ..units import plural
from .records import Backend, Budget, Bytes, Conf, Count, Rate, Ratio, parsed

RESULTS_SCHEMA = 1   # choice.json's and sweep.json's (folder.py); readers refuse any other


@dataclass(frozen=True)
class ReasonRecord:
    """A reason as data: its code and the figures it quotes (`decide.reasons` defines both, and reads one back
    typed with `Reason.from_record`; `report.words` says it)."""

    code: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunnerUp:
    conf: str
    why: str            # what it costs against the winner, or why it may not be recommended
    why_data: ReasonRecord | None = None   # `why` as data (None in files from before reasons were data)


@dataclass(frozen=True)
class ChoiceRecord:
    """One decision in choice.json (`report.analysis.choice_record`), per (environment, backend, budget), as
    consumers read it: export, compare, report. Only the identity and the setting are required; the rest default so
    that older files still read.

    The reasons come twice: as the sentences the reports print (`decision`, `reasons`, `runners_up[].why`,
    `precision`), which every reader has always read, and as data (`decision_data`, `reasons_data`,
    `runners_up[].why_data`, `precision_data`), one record per sentence, from which those sentences were written.
    Files from before the data existed lack it: there it reads as empty (None, ()), and the sentences are all
    there is. The schema number stays: an older alloctune ignores the keys it does not know."""

    env_id: str
    backend: Backend                  # CUDA or SIM
    conf: Conf | None                 # the chosen setting, canonical ('' = the default); None: nothing fits
    workload: str = ""
    workload_hash: str = ""
    budget_bytes: Budget | None = None
    fits: bool = True
    label: str = ""
    baseline: str = ""                # the setting compared against: always the default ('')
    is_default: bool = False
    simulated: bool = False
    torch_version: str | None = None  # the torch the choice is for (a replay: the one simulated)
    features: tuple[str, ...] = ()    # what the job used (settings/known.py's Feature values), as its trials saw it
    env: dict[str, Any] = field(default_factory=dict)
    decision: str = ""                # why this setting won, or why nothing fits: one sentence, no caveats
    reasons: tuple[str, ...] = ()     # everything the summary says, caveats included, in order
    runners_up: tuple[RunnerUp, ...] = ()
    peak_reserved_bytes: Bytes | None = None
    memory_measure: str | None = None   # what the group compared: peak reserved, or device memory across backends
    memory_bytes: Bytes | None = None
    device_peak_used_bytes: Bytes | None = None
    baseline_memory_bytes: Bytes | None = None
    peak_allocated_bytes: Bytes | None = None
    reserved_ratio: float | None = None
    num_alloc_retries: Count | None = None
    baseline_state: str | None = None
    baseline_peak_reserved_bytes: Bytes | None = None
    baseline_reserved_ratio: float | None = None
    throughput_median: Rate | None = None
    baseline_throughput_median: Rate | None = None
    throughput_unit: str | None = None
    throughput_ratio: Ratio | None = None
    throughput_p_value: float | None = None
    throughput_ratio_ci: tuple[float, float] | None = None
    paired_rounds: Count | None = None
    detectable_slowdown: float | None = None
    precision: str = ""
    decision_data: ReasonRecord | None = None
    reasons_data: tuple[ReasonRecord, ...] = ()
    precision_data: ReasonRecord | None = None
    verdict: str = ""
    # The parameters the decision applied (decide/parameters.py). None: a file from before they were kept, whose
    # decision had the defaults.
    max_slowdown: float | None = None
    tie: float | None = None
    repeats: Count = 0
    complete: bool = True             # False: the sweep stopped before its end, or recorded fewer trials than planned
    trials_recorded: Count = 0
    trials_planned: Count | None = None
    # Each replayed setting's speed predicted from its driver work, by conf (decide/speed.SpeedPrediction): a
    # prediction, never a measurement; empty without a calibration.
    predictions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", Backend(self.backend))

    @property
    def setting(self) -> AllocConf | None:
        """The chosen setting (None: nothing fits), parsed when the file was read (`records.parsed`)."""
        return None if self.conf is None else parsed(self.conf)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def how_far(recorded: int, planned: int | None) -> str:
    """How far an interrupted sweep got with a decision (a choice's `trials_recorded`, `trials_planned`): '8 of 12
    planned trials recorded', or, where no count was planned (--repeats auto, hybrid, search) or the count was met
    before the sweep stopped, 'stopped before its end, after 5 trials'."""
    if planned is not None and recorded < planned:
        return f"{recorded} of {planned} planned trials recorded"
    return f"stopped before its end, after {plural(recorded, 'trial')}"


@dataclass(frozen=True)
class ChoiceFile:
    """choice.json as a whole."""

    choices: tuple[ChoiceRecord, ...]
    schema: int = RESULTS_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
