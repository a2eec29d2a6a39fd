"""choice.json's records: one decision per (environment, backend, budget), the one record decide/ builds
(`decide/record.py`), report/ says and shows and every consumer reads (export, compare, report, the `--json` of
sweep and report); the figures of its settings (`figures.SettingFigures`), its reasons as data, and how far an
interrupted sweep got. The folder (`folder.py`) reads and writes the file, a file of an older schema upgraded as it is
read (`upgrade.py`); these are its contents."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..settings.conf import AllocConf, conf_label
from ..units import plural
from .figures import MemoryMeasure, SettingFigures
from .records import Backend, Budget, Conf, Count, Ratio, parsed

# choice.json's. 2: the figures of each setting of the group as one record (`settings`), where 1 kept the winner's
# and the default's as flat keys. A file of an older version is upgraded as it is read (`upgrade.py`); a newer one
# is refused.
CHOICE_SCHEMA = 2


@dataclass(frozen=True)
class ReasonRecord:
    """A reason as data: its code and the figures it quotes (`decide.reasons` defines both, and reads one back
    typed with `Reason.from_record`; `report.words` says it)."""

    code: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunnerUp:
    conf: str
    why: str = ""       # what it costs against the winner, or why it may not be recommended, in words
    why_data: ReasonRecord | None = None   # `why` as data (None in files from before reasons were data)


@dataclass(frozen=True)
class ChoiceRecord:
    """One decision in choice.json, per (environment, backend, budget). decide/ builds it with its reasons as data
    (`decide/record.py`), report/ adds their words (`report/words.worded`) and writes it as it is; consumers read
    it back through the typed reader. Only the identity and the setting are required; the rest default, so that
    older files still read.

    Each setting of the group has its figures once, in `settings` (`winner` and `default` look them up). The
    reasons come twice: as the sentences the reports print (`decision`, `reasons`, `runners_up[].why`,
    `precision`) and as data (`decision_data`, `reasons_data`, `runners_up[].why_data`, `precision_data`), one
    record per sentence, from which those sentences were written. Files from before the data existed lack it:
    there it reads as empty (None, ()), and the sentences are all there is."""

    env_id: str
    backend: Backend                  # CUDA or SIM
    conf: Conf | None                 # the chosen setting, canonical ('' = the default); None: nothing fits
    workload: str = ""
    workload_hash: str = ""
    budget_bytes: Budget | None = None
    torch_version: str | None = None  # the torch the choice is for (a replay: the one simulated)
    features: tuple[str, ...] = ()    # what the job used (settings/known.py's Feature values), as its trials saw it
    env: dict[str, Any] = field(default_factory=dict)
    # Every setting of the group, ranked as the tables list them (decide/order.ranked). A file upgraded from schema
    # 1 has the winner's and the default's alone, and of those the figures it kept.
    settings: tuple[SettingFigures, ...] = ()
    verdict: str = ""                 # the winner's throughput against the default's, in a word or three
    throughput_ratio: Ratio | None = None   # the winner's throughput over the default's (1.0: the default won)
    detectable_slowdown: float | None = None   # the smallest slowdown the sweep could have detected
    decision: str = ""                # why this setting won, or why nothing fits: one sentence, no caveats
    reasons: tuple[str, ...] = ()     # everything the summary says, caveats included, in order
    runners_up: tuple[RunnerUp, ...] = ()
    precision: str = ""
    decision_data: ReasonRecord | None = None
    reasons_data: tuple[ReasonRecord, ...] = ()
    precision_data: ReasonRecord | None = None
    # The parameters the decision applied (decide/parameters.py). None: a file from before they were kept, whose
    # decision had the defaults.
    max_slowdown: float | None = None
    tie: float | None = None
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

    @property
    def fits(self) -> bool:
        return self.conf is not None

    @property
    def is_default(self) -> bool:
        return self.conf == ""

    @property
    def label(self) -> str:
        return "nothing fits" if self.conf is None else conf_label(self.conf)

    @property
    def simulated(self) -> bool:
        return self.backend == Backend.SIM

    @property
    def simulated_as(self) -> str | None:
        """The torch whose allocator a replayed choice followed, as its trials say it (None: measured): what its
        --json (`simulated_torch`) and its export state."""
        return (self.env.get("simulated_as") or self.torch_version) if self.simulated else None

    def figures(self, conf: str | None) -> SettingFigures | None:
        """The figures of the group's setting `conf`, where the file has them."""
        return next((s for s in self.settings if s.conf == conf), None)

    @property
    def winner(self) -> SettingFigures | None:
        """The chosen setting's figures (None: nothing fits)."""
        return self.figures(self.conf)

    @property
    def default(self) -> SettingFigures | None:
        """The default's figures, the baseline every setting is compared with (None: not run in the group)."""
        return self.figures("")

    @property
    def memory_measure(self) -> MemoryMeasure:
        """What its group's memory was compared on, as every report names it (the ranked table's memory column, the
        plot's memory axis): its settings' measure (decide/summary.py), peak reserved where nothing fits."""
        return MemoryMeasure.RESERVED if self.winner is None else self.winner.memory_measure

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
    schema: int = CHOICE_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
