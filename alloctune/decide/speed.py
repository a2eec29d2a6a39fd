"""A setting's speed predicted from the driver calls a replay counts for it (`DriverWork`) and what those calls cost
on the GPU (`Calibration`): no GPU run of the setting. Pure functions, no words.

    predicted step = the default's measured step - the default's driver seconds + the setting's driver seconds

The driver seconds of a step are its cudaMalloc, cudaFree, map and unmap calls, each priced by its fit (fixed + per
MiB) at the step's average count and bytes, plus each synchronisation's fixed overhead. A call is priced as it costs
on a busy device (`CostFit.in_a_job`: timed behind queued GPU work, less the part of it the call waits for), where a
job makes it (a calibration from before that was measured: on an idle device). On one H100 the busy device's were
21% below to 49% above the idle one's, size by size (results/h100-speed-model-v-2026-12-06); two H100 machines
priced the same calls 2 times apart, and one machine's calibrations minutes apart as far or further
(results/h100-calibration-pooled-2026-12-07): a calibration is the machine's at the time. What that leaves out, and
says so: a synchronisation also waits for the work queued before it, which only the job's queue depth knows (a
cudaFree or an unmap in the middle of a step drains the GPU's queue; the time the CPU then needs to fill it again is
not in any count). A setting that synchronises more often than the default therefore never answers from its
prediction alone (`added_syncs`, the synchronisations it adds, says why).
A cudaFree's own synchronisation is in its price (the busy device's less the queued work it waited for); counting it
again among the syncs costs the sync's few microseconds once more, and errs on the slow side.
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from ..results.calibration import Calibration
from ..results.records import Backend, DriverWork, TrialRecord, TrialState, measured_env_id
from ..results.typed import from_json

# How far the priced driver time may fall short of what the calls cost inside a running job. On the H200 (torch
# 2.11, examples/empty_cache_train.py, docs/evidence.md "Speed from driver work") a setting's calls cost up to 2.2
# times their price (max_split_size_mb:128: 8.9% of the step measured, 4.0% priced): the price leaves out the
# stall after a synchronisation and page-table work beyond the calibrated calls. `worst_slowdown` multiplies a
# setting's predicted slowdown by this; only a setting whose worst case stays within the allowance is answered by
# its prediction and one confirming pair.
PRICE_SHORTFALL_SEEN = 2.2   # the most a setting's calls cost over their price on the H200 (above)
PRICE_ERROR = 3.0


@dataclass(frozen=True)
class MeasuredError:
    """How far predicted slowdowns were from slowdowns measured inside one process, where both were made:
    predicted minus measured, the lowest and the highest (-0.065: a setting 6.5 points slower than predicted).
    What the words about a prediction's error say: measured, both ways, never a direction a measurement
    contradicts."""

    low: float
    high: float
    where: str
    # (allowance, settings measured clear of it, those the prediction put on the same side): a sweep acts on the
    # side, so how often the side was right is what a user weighs a skipped setting by; `sides_on` says where
    sides: tuple[tuple[float, int, int], ...] = ()
    sides_on: str = ""

    def side(self, allowance: float) -> tuple[int, int] | None:
        """(settings measured clear of `allowance`, of them predicted on the same side), where that was counted."""
        return next(((clear, same) for a, clear, same in self.sides if abs(a - allowance) < 1e-9), None)


# How far a prediction was from a measurement of what it predicts: each setting as in a process under it from its start,
# timed inside one process. On twelve H100 calls (results/h100-speed-rebuilt-2026-12-06, -06b, -06c, -06d, the two of
# results/h100-calibration-repeat-2026-12-06, the four of results/h100-calibration-pooled-2026-12-07, one each of -07b
# and -07c) jobs that empty the cache every step or two, their model and optimizer rebuilt under each setting at each
# switch of blocks, priced by the call's own busy-device calibration: -24.0 to +26.1, both expandable segments on the
# GPU-bound `big` (measured +73.7% and +61.1%), 5 minutes apart on one machine, each following its calibration: six
# calibrations of that machine in 12 minutes moved this prediction from +51.4% to +80.6% while the measurements held.
# The widest misses are the calibration's drift; the one miss that keeps its sign is the model's (max_split_size_mb:128
# on `mid`, whose CPU issues work for most of its step, predicted 4.4-10.9 too fast on ten of twelve calls: a
# cudaMalloc's cost moves with the state of the CPU's caches, 45 us warm, 338 us cold, which is the job's and not the
# GPU's). On the H200 one job at idle prices, each setting in its own process, the cost of empty_cache() per step (-4.9
# to +2.6: docs/evidence.md, "Speed from driver work"). Blocks switched to beside memory made under the default
# (results/h100-speed-model*-2026-12-06: up to +36.1) are left out: they made other driver calls than the prediction
# counts, and a sweep never confirms in one process where that matters (decide/confirm.py's IN_PROCESS_DRIVER_SHARE).
# The H100 figures and the sides: scripts/jobs/prediction_error.py over the twelve calls' tables (docs/measuring.md
# gives the command); a side is counted only where the measurement's 95% interval is clear of the allowance.
PREDICTION_ERROR = MeasuredError(-0.240, 0.261, "H100 and H200, torch 2.11, four jobs with driver work every step, "
                                 "3-4 settings each", sides=((0.02, 64, 64), (0.05, 69, 69), (0.10, 66, 62)),
                                 sides_on="the H100")


class Unpredicted(str, enum.Enum):
    """Why a setting's speed could not be predicted: it must then be measured."""

    NO_CALIBRATION = "no_calibration"     # no driver-call costs for this GPU
    NO_STEP_TIME = "no_step_time"         # the default's time per step is unknown or zero
    NO_STEADY_STEPS = "no_steady_steps"   # the trace has no steps after the warm-up to count over
    NO_DRIVER_WORK = "no_driver_work"     # its replay counted none (a replay from before it was counted)


@dataclass(frozen=True)
class DriverSeconds:
    """Predicted seconds per step spent in each kind of driver call."""

    device_allocs: float
    device_frees: float
    maps: float
    unmaps: float
    syncs: float

    @property
    def total(self) -> float:
        return self.device_allocs + self.device_frees + self.maps + self.unmaps + self.syncs


@dataclass(frozen=True)
class SpeedPrediction:
    """One setting's predicted time per step against the default's measured one, with the counts and seconds it
    rests on. Every figure named `predicted_*` or in `driver_seconds` is a prediction, not a measurement; the
    figures are None where `unpredicted` says why there are none."""

    work: DriverWork                          # the setting's driver calls per steady step (the replay's counts)
    default_work: DriverWork                  # the default's
    default_step_seconds: float | None        # measured: the default's time per step
    driver_seconds: DriverSeconds | None      # the setting's driver calls, priced
    default_driver_seconds: DriverSeconds | None
    predicted_step_seconds: float | None
    predicted_slowdown: float | None          # predicted step / the default's measured step - 1 (0.05: 5% slower)
    unpredicted: Unpredicted | None = None

    @property
    def worst_slowdown(self) -> float | None:
        """The predicted slowdown with the setting's extra driver time at `PRICE_ERROR` times its price (a
        speed-up is kept as predicted: the error that matters is a slower setting called fast)."""
        s = self.predicted_slowdown
        return None if s is None else s * PRICE_ERROR if s > 0 else s

    def answers_alone(self, max_slowdown: float) -> bool:
        """Whether the prediction alone can say the setting is within `max_slowdown`: its worst case is, and it
        adds no synchronisation (whose stall no count holds)."""
        worst = self.worst_slowdown
        return worst is not None and worst <= max_slowdown and self.added_syncs <= 0

    @property
    def added_syncs(self) -> float:
        """Synchronisations per step beyond the default's: each also waits for queued work, which no count holds."""
        return self.work.syncs - self.default_work.syncs

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["worst_slowdown"] = self.worst_slowdown
        data["unpredicted"] = self.unpredicted.value if self.unpredicted else None
        return data

    @classmethod
    def from_json(cls, data: object, where: str = "prediction") -> "SpeedPrediction":
        """As choice.json keeps it (`ChoiceRecord.predictions`), read back typed."""
        return from_json(cls, data, where)


def driver_seconds(work: DriverWork, calibration: Calibration) -> DriverSeconds:
    """What `work`'s driver calls cost per step on the calibrated GPU."""
    return DriverSeconds(
        device_allocs=calibration.device_alloc.in_a_job.seconds(work.device_allocs, work.device_alloc_bytes),
        device_frees=calibration.device_free.in_a_job.seconds(work.device_frees, work.device_free_bytes),
        maps=calibration.map.in_a_job.seconds(work.maps, work.map_bytes),
        unmaps=calibration.unmap.in_a_job.seconds(work.unmaps, work.unmap_bytes),
        syncs=calibration.sync.seconds(work.syncs, 0))


def predict(work: DriverWork, default_work: DriverWork, default_step_seconds: float | None,
            calibration: Calibration | None) -> SpeedPrediction:
    """The setting whose replay counted `work` against the default (`default_work`, and its measured
    `default_step_seconds`), on the GPU `calibration` priced. The default's time outside driver calls is kept; a
    default whose priced driver calls exceed its measured step (a calibration from a faster GPU) keeps none."""
    if calibration is None:
        why = Unpredicted.NO_CALIBRATION
    elif default_step_seconds is None or default_step_seconds <= 0:
        why = Unpredicted.NO_STEP_TIME
    elif not (work.steps and default_work.steps):
        why = Unpredicted.NO_STEADY_STEPS
    else:
        mine, default = driver_seconds(work, calibration), driver_seconds(default_work, calibration)
        step = max(0.0, default_step_seconds - default.total) + mine.total
        return SpeedPrediction(work, default_work, default_step_seconds, mine, default, step,
                               step / default_step_seconds - 1)
    return SpeedPrediction(work, default_work, default_step_seconds, None, None, None, None, why)


def default_window(records: Iterable[TrialRecord], env_id: str) -> tuple[float, int] | None:
    """The default's measured time per step under `env_id` and the steps it was timed over: its first GPU trial
    with a timed pass, in the order the trials ran (a hybrid sweep's recording trial, which ran before any
    prediction was made, so that every prediction of a sweep, resumed or not, rests on the same figure)."""
    for r in records:
        m = r.measurement
        if (r.backend == Backend.CUDA and r.env_id == env_id and r.conf == "" and r.state is TrialState.OK
                and m is not None and m.measured_seconds and m.measured_steps):
            return m.measured_seconds / m.measured_steps, m.measured_steps
    return None


def step_seconds(records: Iterable[TrialRecord], env_id: str) -> float | None:
    """The default's measured time per step under `env_id` (`default_window`)."""
    window = default_window(records, env_id)
    return window[0] if window is not None else None


def predictions(records: list[TrialRecord],
                calibration: Calibration | None) -> dict[str, dict[str, SpeedPrediction]]:
    """Per measured environment, each replayed setting's prediction against the default replayed with it (the
    replays' driver work, `step_seconds`, `calibration`); an environment whose default has no driver work (a
    replay from before it was counted) has none."""
    replayed: dict[str, dict[str, DriverWork]] = {}
    for r in records:
        if r.backend == Backend.SIM and r.state is TrialState.OK and r.measurement and r.measurement.driver_work:
            replayed.setdefault(measured_env_id(r.env_id), {})[r.conf] = r.measurement.driver_work
    out = {}
    for env_id, works in replayed.items():
        if (default := works.get("")) is not None:
            step = step_seconds(records, env_id)
            out[env_id] = {conf: predict(work, default, step, calibration) for conf, work in works.items()}
    return out


@dataclass(frozen=True)
class PredictedSpeed:
    """The figures of a reason that rests on a setting's prediction (decide/confirm.py)."""

    slowdown: float          # predicted step / the default's measured step - 1
    calls: float             # the setting's driver calls per steady step (DriverWork.calls)
    syncs: float
    default_calls: float
    default_syncs: float
    steps: int               # steady steps the counts are averaged over
    max_slowdown: float
    worst_slowdown: float | None = None   # SpeedPrediction.worst_slowdown (None: a file from before it was kept)

    @classmethod
    def of(cls, p: SpeedPrediction, max_slowdown: float) -> "PredictedSpeed":
        assert p.predicted_slowdown is not None
        return cls(p.predicted_slowdown, p.work.calls, p.work.syncs, p.default_work.calls, p.default_work.syncs,
                   p.work.steps, max_slowdown, p.worst_slowdown)


@dataclass(frozen=True)
class Unpredictable:
    why: Unpredicted


@dataclass(frozen=True)
class Confirmation:
    """The winner's confirmation against its prediction: one pair of processes (the default, then the winner), or
    blocks of steps under each in turn inside one process (`blocks` > 0, decide/inprocess.py)."""

    measured_ratio: float    # the winner's throughput over the default's (measured)
    predicted_ratio: float   # 1 / (1 + predicted slowdown)
    calls: float             # the prediction's driver calls and syncs per steady step
    syncs: float
    noise: float             # a pair: one process's throughput noise (parameters.PROCESS_NOISE); in one process:
                             # the spread of the pairs' log ratios (measured)
    detectable: float        # a pair: what it can tell from noise (parameters.PAIR_DETECTABLE); in one process:
                             # the half-width of the ratio's 95% interval, the resolution reached (measured)
    blocks: int = 0          # timed blocks in one process (0: a pair of processes)


@dataclass(frozen=True)
class AsyncPlan:
    """Whether cudaMallocAsync, which the simulator cannot replay, is measured: named by the user, or needed
    because no native setting meets the budget in the replay."""

    winner: str | None       # the replay's native winner ('' = the default); None: none fits
    winner_bytes: int | None
    budget_bytes: int | None
    named: bool
