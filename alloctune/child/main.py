"""The trial child: one workload under one allocator setting, in a fresh process.

    python -m alloctune.child.main SPEC.json

The parent (`trial/launch.py`) has already put the setting in this process's environment
(PYTORCH_CUDA_ALLOC_CONF), so the allocator reads it when it starts. SPEC.json is a `ChildSpec`
(`child/exchange.py`), read through the typed reader: one that does not read is one line on stderr, exit 2, no
result. This module writes one JSON object to the spec's `result` path (whole: `files.write_file`) and exits 0,
whatever happened to the workload: a failure is data. Besides torch and the standard library it imports only light
alloctune modules (records, readback, the OOM rule, peaks, traces, the settings in force, the workload spec, timing,
provenance, the built-in kinds; tests/test_layers.py's `LIGHT` holds the rule): the child may run under another
interpreter than alloctune's (`--python`), which gets the package through PYTHONPATH and may lack pyyaml or scipy.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from dataclasses import asdict
from types import ModuleType
from typing import Any

from ..errors import ResultsError
from ..files import write_file
from ..results.records import TrialState
from ..runtime.allocator import effective_settings
from ..runtime.oom import is_oom
from ..runtime.peaks import device_peaks
from ..runtime.traces import record_history
from ..settings.conf import AllocConf
from ..settings.readback import mismatch
from ..units import budget_share
from .exchange import ChildSpec, read_spec
from .timing import Observer, timed_pass


def main(spec_path: str) -> int:
    try:
        spec = read_spec(spec_path)
    except ResultsError as exc:   # the parent records a crash without a result, with this line from stderr
        print(f"alloctune child: {exc}", file=sys.stderr)
        return 2
    write_file(spec.result, json.dumps(run(spec)))
    return 0


def run(spec: ChildSpec) -> dict:
    """Run the trial described by `spec` and return the result dict (state, measurement, env, ...)."""
    import torch

    from .provenance import collect_env

    out: dict = {"state": TrialState.CRASHED.value, "measurement": None, "error": None, "effective_conf": None}
    out["env"] = collect_env()
    if not torch.cuda.is_available():
        out["error"] = "no CUDA device is visible to this process (torch.cuda.is_available() is False)"
        return out
    device = torch.device("cuda", 0)
    total = _prepare(torch, spec, device, out)
    sampler = _DevicePeak(torch, device)
    try:
        _measure(torch, spec, out, sampler, total)
    except Exception as exc:  # the workload's failure is the trial's result
        _failed(torch, spec, out, sampler, total, exc)
    return out


def _prepare(torch: ModuleType, spec: ChildSpec, device: Any, out: dict) -> int:
    """The process before the workload starts: its device, the memory budget, allocation history when recording,
    the seeds. Returns the device's memory."""
    torch.cuda.set_device(device)
    total = int(torch.cuda.get_device_properties(device).total_memory)
    out["budget_fraction"] = fraction = budget_share(spec.budget_bytes, spec.budget_fraction, total)
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    if spec.record_trace:
        record_history(torch)
    random.seed(spec.workload.seed)
    torch.manual_seed(spec.workload.seed)
    return total


def _measure(torch: ModuleType, spec: ChildSpec, out: dict, sampler: _DevicePeak, total: int) -> None:
    """The workload built, the settings in force checked, then the warm pass (the memory peaks are this pass's)
    and the measured pass (the same steps again, so the same shapes, now warm: see timing.py)."""
    from ..workload.builtin import resolve_factory

    workload, device = spec.workload, sampler.device
    step = resolve_factory(workload)(dict(workload.params), device, workload.seed)
    effective, readable = effective_settings()
    out["effective_conf"] = str(effective)
    problem = mismatch(AllocConf.parse(spec.conf), effective, readable)
    if problem:
        out.update(state=TrialState.MISMATCH.value, error=problem)
        return
    warmup, steps = workload.warmup_steps, workload.steps
    measured = list(range(warmup, warmup + steps))
    sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
    for i in range(warmup):   # every step once, as the job runs them
        step(i)
        sampler.step_done()
    warm = timed_pass(step, measured, sync, after_step=sampler.step_done)
    memory = _memory(torch, sampler, workload.unit)
    if spec.record_trace:  # the trace covers what the peaks cover
        _dump_trace(torch, spec, out, memory, TrialState.OK.value, total, sampler)
    with Observer(torch, device) as seen:
        timing = timed_pass(step, measured, sync)
    out["state"] = TrialState.OK.value
    out["measurement"] = dict(
        memory, throughput=timing.throughput, measured_seconds=timing.seconds, measured_steps=steps,
        warm_throughput=warm.throughput, block_seconds=list(timing.block_seconds),
        block_units=list(timing.block_units), conditions=seen.conditions)


def _failed(torch: ModuleType, spec: ChildSpec, out: dict, sampler: _DevicePeak, total: int,
            exc: Exception) -> None:
    """The workload raised: an OOM is data (the memory figures so far), anything else a crash with its traceback."""
    out["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]
    if is_oom(exc):
        out["state"] = TrialState.OOM.value
        out["measurement"] = _memory(torch, sampler, spec.workload.unit)
    else:
        out["error"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
    if spec.record_trace and not os.path.exists(spec.record_trace):
        _dump_trace(torch, spec, out, out["measurement"], out["state"], total, sampler)


def _dump_trace(torch: ModuleType, spec: ChildSpec, out: dict, measured: dict | None, state: str, total: int,
                sampler: _DevicePeak) -> None:
    """The snapshot as torch.cuda.memory._dump_snapshot writes it (whole: `files.write_file`), plus an 'alloctune'
    key (memory_viz ignores it) holding what this run measured and where: the simulator is checked against these
    figures."""
    import pickle

    assert spec.record_trace is not None
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    env = out["env"]
    snapshot["alloctune"] = _plain({
        "workload": spec.workload.name, "workload_hash": spec.workload_hash,
        "env_id": spec.env_id, "torch_version": env.get("torch"), "env": env,
        "device_total_bytes": total, "overhead_bytes": sampler.overhead,
        "budget_bytes": spec.budget_bytes,
        "measured": [dict(measured or {}, conf=spec.conf, state=state,
                          effective_conf=out.get("effective_conf"))],
        # where the steps ended, placed among the trace's entries by their time when it is loaded (sim/trace.py)
        "step_ends_us": sampler.step_ends_us, "warmup_steps": spec.workload.warmup_steps,
    })
    write_file(spec.record_trace, lambda f: pickle.dump(snapshot, f))


def _plain(value: object) -> Any:
    """Only plain containers and scalars: the snapshot is read back with a restricted unpickler."""
    return json.loads(json.dumps(value, default=str))


class _DevicePeak:
    """Device memory in use as the driver reports it (includes the CUDA context), sampled after every step.

    The allocator's reserved memory only grows between releases, so a per-step sample sees its peak unless the
    allocator released memory within a step (a retry): then this is a lower bound. `overhead` is the most the
    device held outside the allocator (context, lazily loaded kernels, libraries): the simulator needs it to know
    when cudaMalloc would fail on a full card."""

    def __init__(self, torch: ModuleType, device: Any):
        self._torch, self.device = torch, device
        self.peak = self.overhead = 0
        self.step_ends_us: list[int] = []   # Unix time in µs at each step's end, the clock of a trace's time_us

    def step_done(self) -> None:
        self.step_ends_us.append(time.time_ns() // 1000)
        self.sample()

    def sample(self) -> None:
        free, total = self._torch.cuda.mem_get_info(self.device)
        self.peak = max(self.peak, total - free)
        self.overhead = max(self.overhead, total - free - self._torch.cuda.memory_reserved(self.device))


def _memory(torch: ModuleType, sampler: _DevicePeak, unit: str) -> dict:
    """The memory figures so far, as the measurement's fields (throughput is added by the caller once timed)."""
    sampler.sample()
    peaks = device_peaks(torch.cuda.memory_stats(sampler.device), sampler.device.index, sampler.peak)
    return asdict(peaks.measurement(unit))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
