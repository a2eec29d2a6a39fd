"""A recorded allocation trace, in a process that runs the workload: the allocator's history switched on the same way
by the trial child and the start-up hook (`record_history`), where the hook writes a process's trace
(`trace_path`, which the parent reads back: `trial/job.traced`), the 'alloctune' entry it carries (`trace_meta`) and
the trace written at exit (`write_trace`).

Standard library and light alloctune modules only: the start-up hook imports this inside the user's processes.
"""
from __future__ import annotations

import json
import os
import pickle
from dataclasses import asdict
from typing import Any, Callable

from ..files import write_file
from ..results.records import TrialState
from .peaks import ProcessReport

HISTORY_ENTRIES = 10_000_000   # the allocator's ring buffer of events: a recording keeps the last this many


def record_history(torch: Any) -> None:
    """Switch the allocator's history on, before the workload allocates. context=None: no stack frames, so a
    trace of a million events stays small."""
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=HISTORY_ENTRIES)


def trace_path(folder: str, pid: int) -> str:
    """Where the hook writes process `pid`'s allocation trace, when recording."""
    return os.path.join(folder, f"trace-{pid}.pickle")


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
    from . import graphs

    torch.cuda.memory._record_memory_history(enabled=None)
    # a snapshot that says what it is itself (a dry run's, alloctune/dryrun) keeps that over the measured figures
    snapshot["alloctune"] = {**trace_meta(report, conf, lambda device: torch.cuda.get_device_properties(device).name,
                                          counter.step_ends_us() if counter is not None else [],
                                          counter.warmup if counter is not None else None, graphs.events()),
                             **snapshot.get("alloctune", {})}
    write_file(trace_path(folder, report.pid), pickle.dumps(snapshot))
