"""The trial child: one workload under one allocator setting, in a fresh process.

    python -m alloctune.trial.child SPEC.json

The parent (`launch.py`) has already put the setting in this process's environment (PYTORCH_CUDA_ALLOC_CONF),
so the allocator reads it when it starts. This module writes one JSON object to the spec's `result` path and
exits 0, whatever happened to the workload: a failure is data. Besides torch and the standard library it imports
only alloctune modules that need nothing else (conf, records, builtin, probe): the child may run under another
interpreter than alloctune's (`--python`), which gets the package through PYTHONPATH and may lack pyyaml or scipy.
"""
from __future__ import annotations

import json
import os
import random
import sys
import traceback

from ..results.records import Measurement, TrialState
from ..settings.readback import conf_from_settings, mismatch
from .timing import Observer, timed_pass


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    result = run(spec)
    tmp = spec["result"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, spec["result"])
    return 0


def run(spec: dict) -> dict:
    """Run the trial described by `spec` and return the result dict (state, measurement, env, ...)."""
    import torch

    from ..workload.builtin import resolve_factory
    from .provenance import collect_env

    workload = spec["workload"]
    out: dict = {"state": TrialState.CRASHED.value, "measurement": None, "error": None, "effective_conf": None}
    out["env"] = collect_env()
    if not torch.cuda.is_available():
        out["error"] = "no CUDA device is visible to this process (torch.cuda.is_available() is False)"
        return out
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = _budget_fraction(spec, total)
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    if spec.get("record_trace"):
        # context=None: no stack frames, so a trace of a million events stays small.
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=spec.get("max_entries", 10_000_000))
    seed = int(workload["seed"])
    random.seed(seed)
    torch.manual_seed(seed)
    sampler = _DevicePeak(device)
    try:
        step = resolve_factory(workload)(dict(workload["params"]), device, seed)
        out["effective_conf"], readable = effective_settings()
        problem = mismatch(spec["conf"], out["effective_conf"], readable)
        if problem:
            out.update(state=TrialState.MISMATCH.value, error=problem)
            return out
        warmup, steps = int(workload["warmup_steps"]), int(workload["steps"])
        measured = list(range(warmup, warmup + steps))
        sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
        # The warm pass: every step once, as the job runs them; the memory peaks are this pass's.
        for i in range(warmup):
            step(i)
            sampler.sample()
        warm = timed_pass(step, measured, sync, after_step=sampler.sample)
        memory = _measurement(torch, sampler, workload["unit"])
        if spec.get("record_trace"):  # the trace covers what the peaks cover
            _dump_trace(torch, spec, out, memory, TrialState.OK.value, total, sampler)
        # The measured pass: the same steps again, so the same shapes, now warm (see steady.py).
        with Observer(torch, device) as seen:
            timing = timed_pass(step, measured, sync)
        out["state"] = TrialState.OK.value
        out["measurement"] = dict(
            memory, throughput=timing.throughput, measured_seconds=timing.seconds, measured_steps=steps,
            warm_throughput=warm.throughput, block_seconds=list(timing.block_seconds),
            block_units=list(timing.block_units), conditions=seen.conditions)
    except Exception as exc:  # the workload's failure is the trial's result
        out["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]
        if _is_oom(exc):
            out["state"] = TrialState.OOM.value
            out["measurement"] = _measurement(torch, sampler, workload["unit"])
        else:
            out["error"] = traceback.format_exc()[-4000:]
        if spec.get("record_trace") and not os.path.exists(spec["record_trace"]):
            _dump_trace(torch, spec, out, out["measurement"], out["state"], total, sampler)
    out["budget_fraction"] = fraction
    return out


def _dump_trace(torch, spec: dict, out: dict, measured: dict | None, state: str, total: int,
                sampler: _DevicePeak) -> None:
    """The snapshot as torch.cuda.memory._dump_snapshot writes it, plus an 'alloctune' key (memory_viz ignores
    it) holding what this run measured and where: the simulator is checked against these figures."""
    import pickle

    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    env = out["env"]
    snapshot["alloctune"] = _plain({
        "workload": spec["workload"]["name"], "workload_hash": spec.get("workload_hash"),
        "env_id": spec.get("env_id"), "torch_version": env.get("torch"), "env": env,
        "device_total_bytes": total, "overhead_bytes": sampler.overhead,
        "budget_bytes": spec.get("budget_bytes"),
        "measured": [dict(measured or {}, conf=spec["conf"], state=state,
                          effective_conf=out.get("effective_conf"))],
    })
    with open(spec["record_trace"], "wb") as f:
        pickle.dump(snapshot, f)


def _plain(value):
    """Only plain containers and scalars: the snapshot is read back with a restricted unpickler."""
    return json.loads(json.dumps(value, default=str))


def _budget_fraction(spec: dict, total: int) -> float | None:
    if spec.get("budget_bytes"):
        return min(1.0, spec["budget_bytes"] / total)
    return spec.get("budget_fraction")


class _DevicePeak:
    """Device memory in use as the driver reports it (includes the CUDA context), sampled after every step.

    The allocator's reserved memory only grows between releases, so a per-step sample sees its peak unless the
    allocator released memory within a step (a retry): then this is a lower bound. `overhead` is the most the
    device held outside the allocator (context, lazily loaded kernels, libraries): the simulator needs it to know
    when cudaMalloc would fail on a full card."""

    def __init__(self, device):
        import torch

        self._torch, self._device = torch, device
        self.peak = self.overhead = 0

    def sample(self) -> None:
        free, total = self._torch.cuda.mem_get_info(self._device)
        self.peak = max(self.peak, total - free)
        self.overhead = max(self.overhead, total - free - self._torch.cuda.memory_reserved(self._device))


def _measurement(torch, sampler: _DevicePeak, unit) -> dict:
    """The memory figures so far (throughput is added by the caller once it is timed)."""
    sampler.sample()
    stats = torch.cuda.memory_stats()
    m = Measurement(
        peak_reserved_bytes=int(stats.get("reserved_bytes.all.peak", torch.cuda.max_memory_reserved())),
        peak_allocated_bytes=int(stats.get("allocated_bytes.all.peak", torch.cuda.max_memory_allocated())),
        peak_requested_bytes=stats.get("requested_bytes.all.peak"),
        num_alloc_retries=int(stats.get("num_alloc_retries", 0)),
        num_ooms=int(stats.get("num_ooms", 0)),
        num_device_alloc=stats.get("num_device_alloc"),
        num_device_free=stats.get("num_device_free"),
        device_peak_used_bytes=sampler.peak,
        unit=unit,
    )
    return m.__dict__.copy()


def _is_oom(exc: BaseException) -> bool:
    import torch

    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    # Out-of-memory raised outside the caching allocator (cuBLAS workspaces, cudaMallocAsync pools).
    text = str(exc)
    return "out of memory" in text.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in text


def effective_settings() -> tuple[str, frozenset]:
    """The allocator settings in force, as this torch reports them (call after the allocator started), and the
    keys it could read back.

    The backend and max_split_size (memory_stats) read back on every version; expandable_segments, GC threshold
    and divisions only where the snapshot carries `allocator_settings` (recent versions)."""
    import torch

    backend = torch.cuda.get_allocator_backend()
    if backend != "native":
        return f"backend:{backend}", frozenset({"backend"})
    readable = {"backend", "max_split_size_mb"}
    try:
        settings = torch.cuda.memory._snapshot().get("allocator_settings")
    except Exception:
        settings = None
    if isinstance(settings, dict):
        readable |= {"expandable_segments", "garbage_collection_threshold"}
    return conf_from_settings(settings, torch.cuda.memory_stats().get("max_split_size", -1)), frozenset(readable)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
