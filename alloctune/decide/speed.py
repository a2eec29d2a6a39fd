"""A setting's speed predicted from the driver calls a replay counts for it (`DriverWork`) and what those calls cost
on the GPU (`Calibration`): no GPU run of the setting. Pure functions, no words.

    predicted step = the default's measured step - the default's driver seconds + the setting's driver seconds

The driver seconds of a step are its cudaMalloc, cudaFree, map and unmap calls, each priced by its fit (fixed +
per MiB) at the step's average count and bytes, plus each synchronisation's fixed overhead. What that leaves out,
and says so: a synchronisation also waits for the work queued before it, which only the job's queue depth knows
(a cudaFree or an unmap in the middle of a step drains the GPU's queue; the time the CPU then needs to fill it
again is not in any count). A setting that synchronises more often than the default is therefore never called
negligible; the prediction carries the difference (`added_syncs`) for the confirmation trial to settle.
Calibrations are made on an idle device, so a cudaFree's own synchronisation is in its price; counting it again
among the syncs costs the sync's few microseconds once more, and errs on the slow side.
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from ..results.calibration import Calibration
from ..results.records import DriverWork
from .parameters import DEFAULT_MAX_SLOWDOWN

# A setting whose predicted driver time per step is below this share of the default's step time cannot change a
# speed answer: a tenth of the default --max-slowdown (0.2% of the step).
NEGLIGIBLE_SHARE = DEFAULT_MAX_SLOWDOWN / 10


class Unpredicted(str, enum.Enum):
    """Why a setting's speed could not be predicted: it must then be measured."""

    NO_CALIBRATION = "no_calibration"     # no driver-call costs for this GPU
    NO_STEP_TIME = "no_step_time"         # the default's time per step is unknown or zero
    NO_STEADY_STEPS = "no_steady_steps"   # the trace has no steps after the warm-up to count over


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
    negligible: bool                          # the setting's driver time cannot change a speed answer
    unpredicted: Unpredicted | None = None

    @property
    def added_syncs(self) -> float:
        """Synchronisations per step beyond the default's: each also waits for queued work, which no count holds."""
        return self.work.syncs - self.default_work.syncs

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["unpredicted"] = self.unpredicted.value if self.unpredicted else None
        return data


def driver_seconds(work: DriverWork, calibration: Calibration) -> DriverSeconds:
    """What `work`'s driver calls cost per step on the calibrated GPU."""
    return DriverSeconds(
        device_allocs=calibration.device_alloc.seconds(work.device_allocs, work.device_alloc_bytes),
        device_frees=calibration.device_free.seconds(work.device_frees, work.device_free_bytes),
        maps=calibration.map.seconds(work.maps, work.map_bytes),
        unmaps=calibration.unmap.seconds(work.unmaps, work.unmap_bytes),
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
        negligible = mine.total < NEGLIGIBLE_SHARE * default_step_seconds and work.syncs <= default_work.syncs
        return SpeedPrediction(work, default_work, default_step_seconds, mine, default, step,
                               step / default_step_seconds - 1, negligible)
    return SpeedPrediction(work, default_work, default_step_seconds, None, None, None, None, False, why)
