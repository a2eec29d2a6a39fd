"""A GPU's measured cost of the driver calls the caching allocator makes (`Calibration`), as a sweep stores it
(`names.CALIBRATION_FILE` in its folder, and the per-user store, keyed by GPU model, driver, torch and the host's
CPU) and the cost model reads it (decide/speed.py).

Each kind of call is a straight-line fit, microseconds = fixed + per MiB x MiB, with the sample points it was
fitted to (median and quartiles of the repeats at each size), so a reader can see how well the line holds.
Standard library only: the calibration child (child/calibration.py) builds these records.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from ..errors import ResultsError
from ..files import write_file
from .records import MAX_COUNT, Bytes
from .typed import from_json, load_json, within

CALIBRATION_SCHEMA = 1
MiB = 2**20

COST_KINDS = ("device_alloc", "device_free", "map", "unmap", "sync")   # the CostFit fields of a Calibration

MAX_MICROS = 1e9   # a quarter of an hour for one driver call: a calibration child would have timed out long before
Micros = Annotated[float, within(0, MAX_MICROS, "microseconds")]
Runs = Annotated[int, within(1, MAX_COUNT, "a count of runs")]


@dataclass(frozen=True)
class CostSample:
    """The repeats of one call at one size: their median and quartiles, in microseconds."""

    bytes: Bytes
    runs: Runs
    median_us: Micros
    low_us: Micros     # first quartile (the median itself when there was one run)
    high_us: Micros    # third quartile


Share = Annotated[float, within(0, 1, "a share of the queued work")]


class _Line:
    """A fit's price: microseconds = fixed_us + per_mib_us x MiB (`CostFit`, `BusyFit`)."""

    fixed_us: float
    per_mib_us: float

    def seconds(self, calls: float, nbytes: float) -> float:
        """What `calls` calls moving `nbytes` in all cost, in seconds (the fit is linear, so averages per step
        give the average cost per step)."""
        return (calls * self.fixed_us + nbytes / MiB * self.per_mib_us) * 1e-6


@dataclass(frozen=True)
class CostFit(_Line):
    """One kind of driver call: microseconds = fixed_us + per_mib_us x MiB, fitted to `samples`, measured on an
    idle device. `busy`: the same call on a busy device, as a running job makes it (None: a calibration from before
    it was measured, or a synchronisation, which on a busy device is all wait)."""

    fixed_us: Micros
    per_mib_us: Micros
    samples: list[CostSample]
    busy: "BusyFit | None" = None

    @property
    def in_a_job(self) -> "CostFit | BusyFit":
        """The price of a call a running job makes: the busy device's where it was measured, else the idle one."""
        return self.busy or self


@dataclass(frozen=True)
class BusyFit(_Line):
    """A kind of call timed at each size with GPU work queued before it (`torch.cuda._sleep`, two depths), as a job
    makes it: the device busy. A call that synchronises (cudaFree, an unmap) waits for the queued
    work, one that does not (cudaMalloc, a map, on most drivers) for none; `waits` is that share (the slope of its
    time in the depth), and each sample is the call's own cost, its time less the wait."""

    fixed_us: Micros
    per_mib_us: Micros
    samples: list[CostSample]
    waits: Share
    queued_us: list[Micros]   # the two depths of queued work it was timed behind


@dataclass(frozen=True)
class Calibration:
    """A GPU's driver-call costs, measured by `alloctune calibrate` (or a sweep that needed them) on an idle device
    and on a busy one. `gpu`, `driver`, `torch` and `host_cpu` are what the per-user store is keyed by."""

    schema: int
    gpu: str
    driver: str | None
    cuda: str | None
    torch: str
    measured_at: str             # ISO 8601, UTC
    device_alloc: CostFit        # cudaMalloc of a new segment
    device_free: CostFit         # cudaFree of a cached segment, its own synchronisation of an idle device included
    map: CostFit                 # expandable segments: growing by whole pages (create, map, set access)
    unmap: CostFit               # expandable segments: releasing whole pages (synchronise, unmap, release)
    sync: CostFit                # torch.cuda.synchronize() with nothing queued: the fixed overhead alone
    # The host's CPU model (child/provenance.host_cpu): a call's cost moves with it. None: unknown, or a file from
    # before it was kept (the field is new, so such files still read, under the same schema).
    host_cpu: str | None = None

    @property
    def busy_measured(self) -> bool:
        """Whether every kind of call that moves memory was also timed on a busy device (a calibration from before
        that was measured prices a job's calls at the idle device's)."""
        return all(getattr(self, kind).busy is not None for kind in ("device_alloc", "device_free", "map", "unmap"))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, where: str = "calibration") -> "Calibration":
        if isinstance(data, dict) and data.get("schema") != CALIBRATION_SCHEMA:
            raise ResultsError(f"{where}: schema {data.get('schema')!r} is not one this alloctune reads "
                               f"({CALIBRATION_SCHEMA}); run `alloctune calibrate` again")
        return from_json(cls, data, where)


def read_calibration(path: str | os.PathLike[str]) -> Calibration:
    """The calibration in `path`; damage is one ResultsError line naming the file and the field."""
    return Calibration.from_json(load_json(path), os.fspath(path))


def write_calibration(path: str | os.PathLike[str], calibration: Calibration) -> None:
    """`calibration` as JSON in `path`, written whole (its folder made if missing)."""
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    write_file(path, json.dumps(calibration.to_json(), indent=2) + "\n")
