"""A command's run read back on the parent's side: what the start-up hook left in its folder, as one job.

- `Run`: one run of a command (exit status, output files, the processes' reports);
- `read_reports`: the hook's `proc-<pid>.json` files (`runtime/peaks.ProcessReport`) through the typed reader, in
  the order of a job's processes everywhere (`rank_order`), so that a damaged file is one line naming it and the
  field;
- `job_measurement`: the processes combined into the trial's `Measurement` (the highest peaks, the sum of retries
  and OOMs, the least exact source of the device-level figure, `least_exact`), and whether peak reserved still
  rose in a --steps window's last fifth (`rising`);
- `traced`, `trace_targets`: the traces the hook wrote (`runtime/traces.trace_path`) and where each goes, by rank.

The hook writes these files inside the user's job (`runtime/`); only alloctune's own process reads them.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..results.records import DeviceMemorySource, Measurement
from ..results.typed import from_json, load_json
from ..runtime.peaks import DevicePeaks, ProcessReport, report_path
from ..runtime.traces import trace_path


@dataclass
class Run:
    """What happened to one run of a command: exit status, output files, per-process hook files."""

    returncode: int | None
    timed_out: bool
    wall_seconds: float
    stdout: str
    stderr: str
    processes: list[ProcessReport]
    damage: str | None = None   # a hook file that could not be read (one line): the figures would be incomplete
    features: list[str] | None = None   # the allocator-sensitive features its processes used (None: none observed)


def rank_order(rank: int | None, pid: int | None) -> tuple:
    """The order of a job's processes everywhere: ranks in order, then processes without one by pid."""
    return (rank is None, rank or 0, pid or 0)


def read_reports(folder: str) -> list[ProcessReport]:
    """The hook's files in `folder`, by rank then pid. ResultsError (one line: the file and the field) for a file
    that is not a report: the hook writes each one whole (a temporary file, then a rename), so that is damage."""
    paths = glob.glob(report_path(glob.escape(folder), "*"))
    reports = [from_json(ProcessReport, load_json(path), path) for path in paths]
    return sorted(reports, key=lambda r: rank_order(r.rank, r.pid))


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


def rising(window_reserved: Sequence[int] | None) -> bool | None:
    """Whether the peak reserved still rose in the window's last fifth (`ProcessReport.window_reserved`: at 80% of
    the window, at its end); None where it was not read."""
    return None if window_reserved is None else window_reserved[1] > window_reserved[0]
