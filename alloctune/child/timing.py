"""Steady-state timing for the trial child, and what the machine did meanwhile (stdlib + torch only).

On variable-shape workloads a step's first run of a new shape pays for things a long job pays once: library
heuristics and autotuning for the shape (cuBLAS, cuDNN), the caching allocator growing (cudaMalloc), Python-side
caches. Which shapes are new at which step differs little between settings but a lot in cost from process to
process, and that cost swamped the allocator's effect on throughput (H200: one setting read 56-76k tokens/s in
three processes). So the child runs the workload's steps once (the warm pass: memory peaks are measured there,
as before), then runs the measured steps *again* (step(i) depends on i alone, so they draw the same shapes) and
times that second pass, in CUDA-synchronised blocks whose times are kept: a slow block points at a moment, not a
trial. Around the measured pass it notes what explains an outlier (`Observer`).
"""
from __future__ import annotations

import gc
import math
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

BLOCKS = 8  # timed blocks per measured pass (fewer when there are fewer steps)


@dataclass(frozen=True)
class PassTiming:
    """One timed pass over a list of steps: totals and per-block figures (blocks of consecutive steps)."""

    seconds: float
    units: float
    block_seconds: tuple[float, ...]
    block_units: tuple[float, ...]

    @property
    def throughput(self) -> float | None:
        return self.units / self.seconds if self.seconds > 0 else None


def split(indices: list[int], blocks: int = BLOCKS) -> list[list[int]]:
    """`indices` cut into at most `blocks` runs of consecutive items, as equal as possible (none empty)."""
    count = max(1, min(blocks, len(indices)))
    size, extra = divmod(len(indices), count)
    out, start = [], 0
    for b in range(count):
        end = start + size + (1 if b < extra else 0)
        out.append(indices[start:end])
        start = end
    return [b for b in out if b]


def timed_pass(step, indices: list[int], sync, blocks: int = BLOCKS, after_step=None) -> PassTiming:
    """Run `step(i)` for each index, timing blocks of steps; `sync()` waits for the device at each block edge
    (queued GPU work belongs to the block that queued it). `after_step()`, if given, runs after every step inside
    the timing (the warm pass samples device memory there: a driver query of microseconds). ValueError for a
    step that returns no count of work (negative, NaN, infinite): a throughput no results file holds."""
    sync()
    times, units = [], []
    for block in split(indices, blocks):
        start, done = time.perf_counter(), 0.0
        for i in block:
            did = float(step(i))
            done += did
            if not (did >= 0 and math.isfinite(done)):   # a factory's bug: the trial crashes, saying so
                raise ValueError(f"step {i} returned {did!r} units of work: expected a finite number >= 0 "
                                 f"(the tokens, samples or requests it did)")
            if after_step is not None:
                after_step()
        sync()
        times.append(time.perf_counter() - start)
        units.append(done)
    return PassTiming(sum(times), sum(units), tuple(times), tuple(units))


class Observer:
    """What happened around the measured pass that can explain a slow trial: cudaMalloc calls and reserved growth
    inside it (0 means the cache was warm), Python GC collections and their time, this process's CPU time, the
    host's load, the GPU's SM clock, temperature and other processes on it. Every probe is optional: a figure
    that cannot be read cheaply is None, never an error."""

    def __init__(self, torch, device) -> None:
        self._torch, self._device = torch, device
        self._gc_count, self._gc_seconds, self._gc_started = 0, 0.0, 0.0
        self._start: dict = {}
        self.conditions: dict = {}

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self._gc_count += 1
            self._gc_seconds += time.perf_counter() - self._gc_started

    def _memory(self) -> tuple[int | None, int | None]:
        try:
            stats = self._torch.cuda.memory_stats(self._device)
        except Exception:  # no CUDA allocator here (a CPU test)
            return None, None
        return stats.get("num_device_alloc"), stats.get("reserved_bytes.all.current")

    def __enter__(self) -> "Observer":
        self._gpu = gpu_state(self._torch, self._device)
        self._load = _loadavg()
        self._cpu = time.process_time()
        self._allocs, self._reserved = self._memory()
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on_gc)
        cpu = time.process_time() - self._cpu
        allocs, reserved = self._memory()
        end = gpu_state(self._torch, self._device)
        load = _loadavg()
        self.conditions = {
            "device_allocs": _delta(self._allocs, allocs),
            "reserved_growth_bytes": _delta(self._reserved, reserved),
            "gc_collections": self._gc_count,
            "gc_seconds": round(self._gc_seconds, 6),
            "cpu_seconds": round(cpu, 6),
            "load_avg": [self._load, load] if self._load is not None and load is not None else None,
            "cpu_count": os.cpu_count(),
            "gpu_clock_mhz": _pair(self._gpu, end, "clock_mhz"),
            "gpu_temperature_c": _pair(self._gpu, end, "temperature_c"),
            "gpu_other_processes": end.get("other_processes"),
            "gpu": end.get("gpu"),
        }


def _delta(start: int | None, end: int | None) -> int | None:
    return end - start if start is not None and end is not None else None


def _pair(start: dict, end: dict, key: str) -> list | None:
    return [start[key], end[key]] if start.get(key) is not None and end.get(key) is not None else None


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def gpu_state(torch, device) -> dict:
    """SM clock (MHz), temperature (°C), the number of other compute processes on this GPU, and which GPU it is
    (CUDA_VISIBLE_DEVICES and PCI bus id): through NVML where torch can reach it, else `nvidia-smi`; {} where
    neither answers."""
    state: dict = {"gpu": _gpu_name(torch, device)}
    try:
        handle = torch.cuda._get_pynvml_handler(device)
        import pynvml  # optional: nvidia-ml-py

        state["clock_mhz"] = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        state["temperature_c"] = int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        state["other_processes"] = len(pids - {os.getpid()})
        return state
    except Exception:  # no nvidia-ml-py, an old torch, NVML not loadable: try the command line
        pass
    bus = _pci_bus_id(torch, device)
    if bus is None or shutil.which("nvidia-smi") is None:
        return state
    gpu = _smi(["--query-gpu=clocks.sm,temperature.gpu", "-i", bus])
    if gpu and len(gpu[0]) == 2 and all(v.isdigit() for v in gpu[0]):
        state["clock_mhz"], state["temperature_c"] = int(gpu[0][0]), int(gpu[0][1])
    apps = _smi(["--query-compute-apps=pid", "-i", bus])
    if apps is not None:
        state["other_processes"] = len({row[0] for row in apps if row and row[0].isdigit()} - {str(os.getpid())})
    return state


def _gpu_name(torch, device) -> str | None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    bus = _pci_bus_id(torch, device)
    parts = [f"CUDA_VISIBLE_DEVICES={visible}" if visible is not None else None, bus]
    return " ".join(p for p in parts if p) or None


def _pci_bus_id(torch, device) -> str | None:
    """'00000000:19:00.0', as nvidia-smi -i takes it; None where torch does not say."""
    try:
        props = torch.cuda.get_device_properties(device)
        domain, bus, dev = props.pci_domain_id, props.pci_bus_id, props.pci_device_id
    except Exception:
        return None
    return f"{domain:08X}:{bus:02X}:{dev:02X}.0"


def _smi(args: list[str]) -> list[list[str]] | None:
    try:
        out = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [[v.strip() for v in line.split(",")] for line in out.stdout.strip().splitlines() if line.strip()]
