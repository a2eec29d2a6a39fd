"""One setting's figures in a decision, as choice.json keeps them (`SettingFigures`) for the winner, the default and
every runner-up: how its repeats ended, its memory, its throughput (`Summary`) and its comparison with the default
(`Comparison`). decide/ computes each figure (`decide/summary.py`, `decide/stats.py`, `decide/device.py`: its
`SettingResult` is these figures and the trials they come from); report/ says them. A new figure in a decision is
one field here, its computation there and its words in report/.
"""
from __future__ import annotations

import enum
import math
import sys
from dataclasses import dataclass

from ..settings.conf import conf_label
from .records import Bytes, Conf, Count

# The tests' level: a comparison's p-values are judged against it (`Comparison.significant`), and decide/stats.py
# tests at it.
ALPHA = 0.05
# A ratio of throughputs beyond the float range (1e308 against 5e-324 units/s) is held at the largest float
# (decide/stats.py): every figure stays finite, as the JSON files that keep them require, and an interval that
# reaches it has no width.
LARGEST = sys.float_info.max


class SettingState(str, enum.Enum):
    """How the repeats of one setting ended, as one word. The failures are declared worst first: repeats that ended
    differently are explained by the worst (an OOM means "does not fit", a mismatch means the numbers are not about
    the setting asked for), and tables list failures in this order."""

    FITS = "fits"            # every repeat ran to the end with a measurement
    OOM = "oom"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    CRASHED = "crashed"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """0 for FITS, then the failures worst first."""
        return list(SettingState).index(self)


class MemoryMeasure(str, enum.Enum):
    """What a group's settings are compared on."""

    RESERVED = "peak reserved"
    DEVICE = "peak device memory"   # cudaMemGetInfo's used memory, sampled after every step (CUDA context included)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Summary:
    """Median and 95% interval of repeated samples; `ci` is None with fewer than 2 usable samples. `n`: the samples
    (None: a file upgraded from schema 1, which kept the median alone)."""

    n: Count | None
    median: float
    ci_low: float | None
    ci_high: float | None
    outliers: tuple[float, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Candidate against baseline.

    Paired (`pairs` > 0, `decide.stats.compare_paired`): `ratio` is the geometric mean of the per-round ratios and
    the tests are t-tests on their logs. Unpaired (`decide.stats.compare`): `ratio` = candidate median / baseline
    median, Welch's test.
    `p_value`: two-sided test that the two differ (None with too few samples).
    `p_slower`: one-sided test that the candidate is slower than `1 - tolerance` times the baseline (None as well in
    a file upgraded from schema 1, which did not keep it).
    `ci_low`, `ci_high`: the 95% interval of the ratio (None with too few samples).
    `tolerance`: the max slowdown `p_slower` tests against (None: a file upgraded from schema 1 from before the max
    slowdown was kept, which decided with the default).
    """

    ratio: float
    p_value: float | None
    p_slower: float | None
    tolerance: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    pairs: Count = 0

    @property
    def half_width(self) -> float | None:
        """Half the interval's width, relative (0.02 = ±2%): the smallest difference this comparison could
        detect. The interval is symmetric on the log scale, so this is exp(h) - 1 for a log half-width h."""
        if self.ci_low is None or self.ci_high is None or self.ci_low <= 0 or self.ci_high >= LARGEST:
            return None
        return math.sqrt(self.ci_high / self.ci_low) - 1

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < ALPHA

    @property
    def slower_beyond_tolerance(self) -> bool:
        return self.p_slower is not None and self.p_slower < ALPHA

    def against(self, median: float, default_median: float) -> bool:
        """The medians of all runs point the other way from `ratio`: paired, it is the mean of each round's ratio
        and can disagree with them (74,227 against 70,310 tokens/s beside 0.935x); what shows both says so."""
        return (median - default_median) * (self.ratio - 1) < 0

    @property
    def verdict(self) -> str:
        """'faster', 'slower', 'no significant difference', or 'not tested' with fewer than 2 samples a side."""
        if self.p_value is None:
            return "not tested (too few repeats)"
        if not self.significant:
            return "no significant difference"
        return "faster" if self.ratio > 1 else "slower"


@dataclass(frozen=True)
class Contamination:
    """A repeat whose device figure is far above what the trial itself can hold: its peak reserved plus what it holds
    outside the allocator (`context_bytes`: the record's overhead figure where it has one, else decide/device.py's
    CONTEXT_ALLOWANCE), by more than the tie. Another process's memory was counted with it; the figure is not
    used."""

    repeat: int
    device_bytes: int
    reserved_bytes: int
    context_bytes: int
    context_measured: bool   # context_bytes is the trial's own overhead figure, not the allowance
    tie: float


@dataclass(frozen=True)
class SettingFigures:
    """One setting of a decision group, reduced to what the choice compares and the reports show: medians of memory
    over the repeats that ran, the throughput summary, the comparison with the default, and what the tables flag.
    Only `conf` is required: a file upgraded from schema 1 kept the winner's and the default's figures alone, and
    not all of them (`upgrade.py`)."""

    conf: Conf                         # canonical ('' = the default)
    state: SettingState = SettingState.FITS
    repeats: Count = 0                 # trials counted (0: not kept, a file upgraded from schema 1)
    failed_repeats: Count = 0
    memory_measure: MemoryMeasure = MemoryMeasure.RESERVED   # what its group compares (decide/summary.py)
    memory: Bytes | None = None        # its figure under `memory_measure`
    peak_reserved_bytes: Bytes | None = None
    peak_allocated_bytes: Bytes | None = None
    peak_requested_bytes: Bytes | None = None
    reserved_ratio: float | None = None
    fragmentation: float | None = None
    num_alloc_retries: Count | None = None   # max over the repeats that ran: one retry is already a device-wide sync
    device_peak_used_bytes: Bytes | None = None   # the lowest plausible reading over the repeats (decide/device.py)
    device_bytes: Bytes | None = None  # the memory of the device it ran on (a replay's: the simulated one's)
    throughput: Summary | None = None
    unit: str | None = None
    vs_default: Comparison | None = None   # None for the default itself and where either side has no throughput
    memory_spread: float | None = 0.0  # max / min - 1 of peak reserved over the repeats (None: not finite)
    unstable: bool = False             # peak reserved moved between repeats beyond what its backend allows
    device_spread: float | None = 0.0  # the same of the plausible device figures (None: not finite)
    device_disagrees: bool = False     # ... beyond decide/device.py's DEVICE_AGREEMENT (the lowest is used)
    contaminated: tuple[Contamination, ...] = ()   # repeats whose device figure was not used
    whole_card: bool = False           # it fits, but took (nearly) all of the device's memory
    error: str | None = None           # the first failed repeat's error, last line

    @property
    def label(self) -> str:
        return conf_label(self.conf)

    @property
    def is_default(self) -> bool:
        return self.conf == ""

    @property
    def fits(self) -> bool:
        return self.state is SettingState.FITS

    @property
    def memory_figure(self) -> Bytes | None:
        """Its memory as every report shows it (the ranked tables, the plot's memory axis and Pareto front): the
        driver-level peak where its group compares device memory (`memory_measure`), else its peak reserved."""
        return self.memory if self.memory_measure is MemoryMeasure.DEVICE else self.peak_reserved_bytes

    @property
    def peak(self) -> int:
        """`memory` as the tables show it: a setting that does not fit has none (0)."""
        return self.memory or 0
