"""What a process's allocator measured, in one shape for every path that measures it.

- `device_peaks`: one device's `torch.cuda.memory_stats()` and the device-level peak the caller sampled, as a
  `DevicePeaks` (the trial child makes its `Measurement` from it; the start-up hook writes one per device);
- `ProcessReport`: what the start-up hook writes for one process of a command (`proc-<pid>.json`), read back by
  `read_reports` through the typed reader, so that a damaged file is one line naming it and the field;
- `StepCount`, `DeviceBudget`: the steps the hook counted in a process, and the budget it set on each device;
- `trace_meta`: what a traced process's snapshot carries under 'alloctune' (the hook writes it beside the report);
- `job_measurement`: a command's processes combined into the trial's `Measurement` (the highest peaks, the sum
  of retries and OOMs, the least exact source of the device-level figure).

Standard library and light alloctune modules only: the start-up hook imports this inside the user's processes.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Callable, Mapping, Sequence

from ..results.records import Bytes, Count, DeviceMemorySource, Measurement, ThroughputSource, TrialState
from ..results.typed import Check, from_json, load_json


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


def _growth_problem(rows: list[list[int]]) -> str | None:
    bad = next((row for row in rows if len(row) != 3 or min(row) < 0), None)
    return None if bad is None else f"expected [step, reserved, allocated] of non-negative integers, got {bad!r}"


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
    growth_samples: Annotated[list[list[int]], Check(_growth_problem)] = field(default_factory=list)
    budgets: list[DeviceBudget] = field(default_factory=list)   # each device the budget was set on
    # What it did that allocator settings are sensitive to: features.observed(), an `observation.Observation`
    # (read as one by trial/command.py: this module stays light for the trial child).
    features: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def report_path(folder: str, pid: int | str) -> str:
    """Where the hook writes process `pid`'s report."""
    return os.path.join(folder, f"proc-{pid}.json")


def rank_order(rank: int | None, pid: int | None) -> tuple:
    """The order of a job's processes everywhere: ranks in order, then processes without one by pid."""
    return (rank is None, rank or 0, pid or 0)


def trace_path(folder: str, pid: int) -> str:
    """Where the hook writes process `pid`'s allocation trace, when recording."""
    return os.path.join(folder, f"trace-{pid}.pickle")


def trace_targets(processes: Sequence[tuple[int | None, int | None]], output: Path) -> list[Path]:
    """Where the traces of these processes ((pid, rank) each) go: `output` for one, else `<stem>.rank<N><suffix>`
    (`.pid<N>` without a rank), in the order given: what `record -- CMD` writes, and a hybrid sweep keeps."""
    if len(processes) == 1:
        return [output]
    out, labels = [], set()
    for pid, rank in processes:
        label = f"rank{rank}" if rank is not None else f"pid{pid}"
        label = label if label not in labels else f"{label}.pid{pid}"   # e.g. a rank's own CUDA worker
        labels.add(label)
        out.append(output.with_name(f"{output.stem}.{label}{output.suffix}"))
    return out


def traced(folder: str, processes: Sequence[ProcessReport], output: Path) -> list[tuple[str, Path]]:
    """The traces the hook wrote in `folder` for these processes (in their order), each with where it goes
    (`trace_targets`). A process that allocated nothing on any device is left out: torch.compile's compile workers
    initialise CUDA and record an empty history, which has nothing to replay."""
    found = [p for p in processes if p.devices and os.path.exists(trace_path(folder, p.pid))]
    return list(zip([trace_path(folder, p.pid) for p in found], trace_targets([(p.pid, p.rank) for p in found],
                                                                              output)))


def trace_meta(report: ProcessReport, conf: str, gpu_name: Callable[[int], str], step_ends_us: list[int],
               warmup_steps: int | None, pool_events: list[dict] | None = None) -> dict[str, Any]:
    """The 'alloctune' entry of the snapshot a process recorded under `conf`: the command and the process, the
    figures of the device it peaked on most, and where it was recorded (`gpu_name(device)`, torch), as a workload's
    trace says it: reports of a replay name that GPU and torch; the Unix time in µs at the end of each step counted
    and the warm-up (`counting.Counter`), and the CUDA graph captures (`graphs.py`), which loading places among the
    entries. Plain JSON values only: the
    snapshot is read back with an unpickler that admits no class."""
    device = max(report.devices, key=lambda d: d.peak_reserved_bytes, default=None)
    measured = dict(asdict(device) if device else {}, conf=conf, state=TrialState.OK.value,
                    effective_conf=report.effective_conf)
    meta = {"command": report.argv, "rank": report.rank, "pid": report.pid, "torch_version": report.torch_version,
            "device_total_bytes": report.device_total_bytes,
            "overhead_bytes": device.overhead_bytes if device else None, "measured": [measured],
            "env": {"gpu": gpu_name(device.device if device else 0), "torch": report.torch_version},
            "step_ends_us": step_ends_us, "warmup_steps": warmup_steps, "pool_events": pool_events or []}
    return json.loads(json.dumps(meta, default=str))


def write_trace(torch: Any, folder: str, report: ProcessReport, snapshot: dict, conf: str, counter: Any) -> None:
    """The hook at exit, recording: `snapshot` (the allocator's, history on) written as process `report.pid`'s trace
    in `folder` with its 'alloctune' entry (`trace_meta`; steps from `counter`, a counting.Counter or None), and the
    recording stopped."""
    import pickle

    from ..files import write_file
    from . import graphs

    torch.cuda.memory._record_memory_history(enabled=None)
    snapshot["alloctune"] = trace_meta(report, conf, lambda device: torch.cuda.get_device_properties(device).name,
                                       counter.step_ends_us() if counter is not None else [],
                                       counter.warmup if counter is not None else None, graphs.events())
    write_file(trace_path(folder, report.pid), pickle.dumps(snapshot))


def read_reports(folder: str) -> list[ProcessReport]:
    """The hook's files in `folder`, by rank then pid. ResultsError (one line: the file and the field) for a file
    that is not a report: the hook writes each one whole (a temporary file, then a rename), so that is damage."""
    paths = glob.glob(report_path(glob.escape(folder), "*"))
    reports = [from_json(ProcessReport, load_json(path), path) for path in paths]
    return sorted(reports, key=lambda r: rank_order(r.rank, r.pid))


def job_measurement(devices: Sequence[DevicePeaks], throughput: float | None, unit: str | None,
                    seconds: float | None, steps: int | None) -> Measurement:
    """A command's trial: the highest of each peak over its processes and devices (the one that decides whether the
    job fits), retries and OOMs summed, and the throughput measured for the whole command."""

    def most(name: str) -> int | None:
        values = [getattr(d, name) for d in devices if getattr(d, name) is not None]
        return max(values) if values else None

    sources = {d.device_memory_source for d in devices if d.device_peak_used_bytes is not None}
    return Measurement(
        peak_reserved_bytes=most("peak_reserved_bytes") or 0, peak_allocated_bytes=most("peak_allocated_bytes") or 0,
        peak_requested_bytes=most("peak_requested_bytes"),
        num_alloc_retries=sum(d.num_alloc_retries for d in devices), num_ooms=sum(d.num_ooms for d in devices),
        device_peak_used_bytes=most("device_peak_used_bytes"), overhead_bytes=most("overhead_bytes"),
        device_memory_source=least_exact(sources),
        throughput=throughput, unit=unit, measured_seconds=seconds, measured_steps=steps)


# Most exact first: the driver's figure for the process, the device's less what it held before, the whole device.
_EXACTNESS = (DeviceMemorySource.NVML, DeviceMemorySource.BASELINE, DeviceMemorySource.DEVICE)


def least_exact(sources: set[DeviceMemorySource | None]) -> DeviceMemorySource | None:
    """What a maximum over figures of these sources counts: the least exact of them. None when none says; a
    figure of unknown source beside known ones counts as the whole device's, as in records from before sources
    were kept."""
    known = {s for s in sources if s is not None}
    if not known:
        return None
    return DeviceMemorySource.DEVICE if None in sources else max(known, key=_EXACTNESS.index)
