"""What a process's allocator measured, in one shape for every path that measures it.

- `device_peaks`: one device's `torch.cuda.memory_stats()` and the device-level peak the caller sampled, as a
  `DevicePeaks` (the trial child makes its `Measurement` from it; the start-up hook writes one per device);
- `ProcessReport`: what the start-up hook writes for one process of a command (`proc-<pid>.json`, `report_path`),
  which the parent reads back through the typed reader (`trial/job.read_reports`), so that a damaged file is one
  line naming it and the field;
- `StepCount`, `DeviceBudget`: the steps the hook counted in a process, and the budget it set on each device.

Standard library and light alloctune modules only: the start-up hook imports this inside the user's processes.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any, Mapping

from ..results.alternation import Alternation
from ..results.records import Bytes, Count, DeviceMemorySource, GrowthSamples, Measurement, ThroughputSource
from ..results.typed import Check


@dataclass(frozen=True)
class DevicePeaks:
    """One device of one process, over the whole process. Names follow torch.cuda.memory_stats, as `Measurement`'s
    do; a figure this torch does not count is None."""

    device: int
    peak_reserved_bytes: Bytes
    peak_allocated_bytes: Bytes
    peak_requested_bytes: Bytes | None = None
    num_alloc_retries: Count = 0
    num_ooms: Count = 0
    num_device_alloc: Count | None = None
    num_device_free: Count | None = None
    device_peak_used_bytes: Bytes | None = None   # the driver's view: includes the CUDA context
    overhead_bytes: Bytes | None = None           # the most in use outside the allocator (context, libraries)
    device_memory_source: DeviceMemorySource | None = None   # what device_peak_used_bytes counts

    def measurement(self, unit: str | None) -> Measurement:
        """These figures as one trial's memory measurement (throughput is added once it is timed)."""
        return Measurement(**{name: getattr(self, name) for name in _MEASURED}, unit=unit)


_MEASURED = [f.name for f in fields(DevicePeaks) if f.name in {m.name for m in fields(Measurement)}]


def device_peaks(stats: Mapping[str, Any], device: int, used_peak: int | None = None,
                 overhead: int | None = None, source: DeviceMemorySource | None = None) -> DevicePeaks:
    """`stats` (torch.cuda.memory_stats(device)) as figures, with the device-level peak and overhead the caller
    sampled, and what that peak counts. A peak or count missing from `stats` is 0, as torch's own
    max_memory_reserved() reads it; the figures older versions lack (requested bytes, device allocations) are
    None."""
    return DevicePeaks(
        device=device,
        peak_reserved_bytes=int(stats.get("reserved_bytes.all.peak", 0)),
        peak_allocated_bytes=int(stats.get("allocated_bytes.all.peak", 0)),
        peak_requested_bytes=_optional(stats, "requested_bytes.all.peak"),
        num_alloc_retries=int(stats.get("num_alloc_retries", 0)),
        num_ooms=int(stats.get("num_ooms", 0)),
        num_device_alloc=_optional(stats, "num_device_alloc"),
        num_device_free=_optional(stats, "num_device_free"),
        device_peak_used_bytes=used_peak,
        overhead_bytes=overhead,
        device_memory_source=source if used_peak is not None else None,
    )


def _optional(stats: Mapping[str, Any], key: str) -> int | None:
    value = stats.get(key)
    return None if value is None else int(value)


def _mark_problem(mark: tuple[float, ...]) -> str | None:
    return None if len(mark) == 2 else f"expected [time, units], got {len(mark)} values"


Mark = Annotated[tuple[float, float], Check(_mark_problem)]   # one alloctune.step(): (time.perf_counter(), units)


def _counted_problem(source: ThroughputSource) -> str | None:
    counted = (ThroughputSource.STEP_CALLS, ThroughputSource.OPTIMIZER_STEPS)
    return None if source in counted else f"expected {' or '.join(repr(str(c)) for c in counted)}, got {str(source)!r}"


@dataclass(frozen=True)
class StepCount:
    """Steps of one kind that the start-up hook counted in one process (`runtime/counting.py`): one optimizer's
    steps (or those of optimizers that succeeded each other), or the calls that --step-on names. Times are the
    process's time.perf_counter()."""

    source: Annotated[ThroughputSource, Check(_counted_problem)]   # OPTIMIZER_STEPS or STEP_CALLS
    name: str                     # the optimizer's class (a chain's first), or what --step-on names
    count: Count
    warmup: Count                 # the timed window starts at the end of this step (--warmup-steps, at least 1;
                                  # later where a chain's optimizers took over before it)
    start: float | None = None    # then, after synchronising the device; None: never got that far
    last: float | None = None     # the host's time at the end of the last step counted
    end: float | None = None      # synchronised: at the end of the --steps window, or at exit; None without CUDA
    # Optimizers whose steps these are, one after another (`counting.py`'s chains; older reports: one); 0: calls.
    optimizers: Count = 1


@dataclass(frozen=True)
class DeviceBudget:
    """The memory budget as the hook set it on one device, when the process first used that device."""

    device: int
    fraction: float               # asked: torch.cuda.set_per_process_memory_fraction(fraction, device)
    read_back: float | None       # torch.cuda.get_per_process_memory_fraction(device); None: this torch lacks it


def _window_problem(figures: list[int]) -> str | None:
    return None if len(figures) == 2 else f"expected [at 80% of the window, at its end], got {len(figures)} values"


@dataclass(frozen=True)
class ProcessReport:
    """One Python process of a command, as the start-up hook saw it at exit (`proc-<pid>.json`). Only a process
    that initialised CUDA or marked steps writes one; the CUDA figures are there only when `cuda` is true. The
    hook writes every field; a default is what a process that showed nothing of the kind would have."""

    pid: int
    cuda: bool                    # the process initialised CUDA through torch
    ppid: int | None = None
    rank: int | None = None       # RANK, else LOCAL_RANK; None when neither is set
    argv: list[str] = field(default_factory=list)
    steps: list[Mark] = field(default_factory=list)   # its alloctune.step() marks, in order
    oom_message: str | None = None    # an uncaught out-of-memory error's message
    torch_version: str | None = None  # None: the process never imported torch
    exit_time: float | None = None    # time.time() when the hook wrote this
    devices: list[DevicePeaks] = field(default_factory=list)   # each device it allocated on
    effective_conf: str | None = None    # the settings in force as torch reports them
    mismatch: str | None = None          # why they differ from those asked for; None when they agree
    device_total_bytes: Bytes | None = None   # device 0's memory
    counted: list[StepCount] = field(default_factory=list)   # steps the hook counted, first seen first
    optimizer_hook: bool | None = None   # torch has the global optimizer step hook; None: torch.optim never loaded
    window_ended: bool = False           # the hook ended the process at the end of its --steps window
    auto_window: bool = False            # that window was the automatic one (ALLOCTUNE_HOOK_EARLY_STOP=1)
    # Peak reserved (the most over its devices) at 80% of the window and at its end; None without a window or CUDA.
    window_reserved: Annotated[list[Bytes], Check(_window_problem)] | None = None
    # ALLOCTUNE_HOOK_GROWTH_STEPS=K: [step, reserved, allocated] (summed over its devices) at steps K and 2K.
    growth_samples: GrowthSamples = field(default_factory=list)
    budgets: list[DeviceBudget] = field(default_factory=list)   # each device the budget was set on
    # What it did that allocator settings are sensitive to: features.observed(), an `observation.Observation`
    # (read as one by trial/features.py: this module stays light for the trial child).
    features: dict[str, Any] | None = None
    # ALLOCTUNE_HOOK_ALTERNATE: the blocks it timed under its setting and the other in turn (runtime/alternate.py);
    # `devices` then holds its figures at the first switch (its own setting's part of the run).
    alternation: Alternation | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def report_path(folder: str, pid: int | str) -> str:
    """Where the hook writes process `pid`'s report."""
    return os.path.join(folder, f"proc-{pid}.json")
