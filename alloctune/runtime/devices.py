"""Inside one process of a user's job, from CUDA initialisation on (the start-up hook calls these with the
process's `torch.cuda`; nothing here imports torch): how much of each device belongs to this process, and its
memory budget on each device it uses.

Device memory of the process (`DeviceMemory.used`), the most exact figure the machine gives:
- NVML: the driver's used memory for this process's pid on the device (`nvmlDeviceGetComputeRunningProcesses`,
  through torch's own NVML handle, which maps CUDA_VISIBLE_DEVICES). Other processes on the GPU do not count.
- BASELINE: where the driver does not list this pid (a PID namespace: a container sees other pids than the
  driver) or gives no figure for it, the device's used memory less what it held at this process's CUDA
  initialisation, before its first allocation (read through NVML, which makes no CUDA context). What other
  processes allocate meanwhile still counts.
- DEVICE: without NVML (nvidia-ml-py not installed), the device's total - free (cudaMemGetInfo), as before
  sources were kept: every process on the GPU counts.
A device's source is decided at its first reading and kept, so that its peak is one kind of figure.

The budget (`Budget`) is set on each device as the process first uses it: setting it asks the device for its
memory, which makes a CUDA context there, so setting it on every visible device would put a context (hundreds of
MiB) on GPUs that other ranks use.

`Sampler` reads the process's memory on each device it allocated on, on a thread of its own from CUDA
initialisation to exit, and keeps the most it used and the most in use outside the allocator; each reading also
sets the budget on a device the process has begun to use. `peaks` gives the per-device figures the hook writes;
`CudaJob`, what the step counter (`counting.py`) asks of the process's devices.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from ..results.records import DeviceMemorySource
from ..units import budget_share
from .peaks import DeviceBudget, DevicePeaks, device_peaks

SAMPLE_INTERVAL_S = 0.05


class DeviceMemory:
    """What each device holds for this process. `cuda` is torch.cuda, initialised; made at CUDA initialisation,
    before the process's first allocation, where it reads the baselines."""

    def __init__(self, cuda: Any, pid: int | None = None):
        self.cuda = cuda
        self.pid = os.getpid() if pid is None else pid
        self.nvml: Any = getattr(cuda, "pynvml", None)   # torch.cuda imports nvidia-ml-py's pynvml when installed
        self.handles: dict[int, Any] = {}
        self.baseline: dict[int, int] = {}
        self.sources: dict[int, DeviceMemorySource] = {}
        handler = getattr(cuda, "_get_pynvml_handler", None)
        if self.nvml is None or handler is None:
            return
        for device in range(cuda.device_count()):
            try:
                handle = handler(device)
                self.baseline[device] = int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)
            except Exception:   # not readable through NVML: this device's figure is the device's own
                continue
            self.handles[device] = handle

    def used(self, device: int) -> tuple[int, DeviceMemorySource] | None:
        """This process's memory on `device` and what the figure counts; None when the source of its earlier
        readings gives no figure this time. The device-wide fallback asks CUDA: the calling thread must be on
        `device` (torch.cuda.set_device), or a device guard switching back could make a context elsewhere."""
        handle = self.handles.get(device)
        if handle is None:
            free, total = self.cuda.mem_get_info(device)
            self.sources[device] = DeviceMemorySource.DEVICE
            return total - free, DeviceMemorySource.DEVICE
        source = self.sources.get(device)
        if source in (None, DeviceMemorySource.NVML):
            mine = process_memory(self.nvml, handle, self.pid)
            if mine is not None:
                self.sources[device] = DeviceMemorySource.NVML
                return mine, DeviceMemorySource.NVML
            if source is DeviceMemorySource.NVML:
                return None
            self.sources[device] = DeviceMemorySource.BASELINE
        now = int(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)
        return max(0, now - self.baseline[device]), DeviceMemorySource.BASELINE


def process_memory(nvml: Any, handle: Any, pid: int) -> int | None:
    """The driver's used memory of process `pid` on the device, or None: not listed, or no figure (nvidia-ml-py
    gives None where the driver reports none)."""
    try:
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return None
    used = next((p.usedGpuMemory for p in processes if p.pid == pid), None)
    return None if used is None else int(used)


class Budget:
    """The memory budget of a process: a byte budget (a share of each device's memory) or a fraction."""

    def __init__(self, cuda: Any, budget_bytes: int | None, fraction: float | None):
        self.cuda = cuda
        self.budget_bytes = budget_bytes
        self.fraction = fraction
        self.used: set[int] = set()
        self.set: list[DeviceBudget] = []   # in the order the devices were first used
        self.lock = threading.Lock()

    def use(self, device: int) -> None:
        """The process uses `device` (made it its device, or allocated there): the budget there, once."""
        with self.lock:
            if device in self.used:
                return
            self.used.add(device)
        share = budget_share(self.budget_bytes, self.fraction, self.cuda.get_device_properties(device).total_memory)
        if share is not None:
            budget = set_budget(self.cuda, device, share)
            with self.lock:
                self.set.append(budget)


def set_budget(cuda: Any, device: int, share: float) -> DeviceBudget:
    """Set the budget on `device` and read it back where this torch can."""
    cuda.set_per_process_memory_fraction(share, device)
    read = getattr(cuda, "get_per_process_memory_fraction", None)
    return DeviceBudget(device, share, float(read(device)) if read is not None else None)


def allocated_on(cuda: Any) -> list[int]:
    """The devices this process allocated on: only these are touched (another would get a CUDA context)."""
    return [i for i in range(cuda.device_count()) if cuda.memory_reserved(i) > 0]


class Sampler:
    """This process's memory on the devices it allocated on (`memory`), read every SAMPLE_INTERVAL_S on a thread
    of its own (`start`) and once more at exit (`last`): the most it used (`peak`, device index -> bytes) and the
    most in use outside the allocator (`overhead`: context, libraries)."""

    def __init__(self, cuda: Any, memory: DeviceMemory, budget: Budget | None):
        self.cuda = cuda
        self.memory = memory
        self.budget = budget
        self.peak: dict[int, int] = {}
        self.overhead: dict[int, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()      # set: the thread samples no more
        self.stopped = threading.Event()   # set by the thread as it ends

    def sample(self) -> None:
        """One reading of every device the process allocated on, and its budget there if not yet set.

        The calling thread is first moved onto the device it reads: a device guard that switched back would
        otherwise make a context on the thread's previous device, which may be a GPU this process never used
        (another rank's)."""
        for i in allocated_on(self.cuda):
            self.cuda.set_device(i)
            if self.budget is not None:
                self.budget.use(i)
            figure = self.memory.used(i)
            if figure is None:
                continue
            reserved = self.cuda.memory_reserved(i)
            with self.lock:
                self.peak[i] = max(self.peak.get(i, 0), figure[0])
                self.overhead[i] = max(self.overhead.get(i, 0), figure[0] - reserved)

    def start(self) -> None:
        threading.Thread(target=self._run, name="alloctune-sampler", daemon=True).start()

    def _run(self) -> None:
        try:
            while not self.stop.wait(SAMPLE_INTERVAL_S):
                self.sample()
        except Exception:
            pass
        finally:
            self.stopped.set()

    def last(self) -> None:
        """At exit: the thread stopped (waited for up to a second: not two threads switching devices at once), a
        last reading, and the calling thread back on its device if it has a context there (a SIGTERM handler of
        the program's own may follow)."""
        self.stop.set()
        self.stopped.wait(1.0)
        current = self.cuda.current_device()
        self.sample()
        if self.cuda.memory_reserved(current) > 0:
            self.cuda.set_device(current)


def peaks(cuda: Any, sampler: Sampler | None) -> list[DevicePeaks]:
    """Each device this process allocated on (a reserved peak above zero): the allocator's figures, with what
    `sampler` read of the device (None: nothing sampled)."""
    devices = []
    for i in range(cuda.device_count()):
        stats = cuda.memory_stats(i)
        if stats.get("reserved_bytes.all.peak"):
            seen = (sampler.peak.get(i), sampler.overhead.get(i), sampler.memory.sources.get(i)) if sampler else ()
            devices.append(device_peaks(stats, i, *seen))
    return devices


class CudaJob:
    """`counting.Job` for one process of the user's job: the devices it allocated on, read through `cuda()`
    (torch.cuda once the process initialised CUDA, else None: no figures, nothing to synchronise), and `end`,
    what the end of the --steps window does."""

    def __init__(self, cuda: Callable[[], Any], end: Callable[[], None]):
        self.cuda = cuda
        self.end = end

    def synced(self) -> float:
        cuda = self.cuda()
        if cuda is not None:
            for i in allocated_on(cuda):
                cuda.synchronize(i)
        return time.perf_counter()

    def reserved_peak(self) -> int | None:
        cuda = self.cuda()
        return None if cuda is None else max((cuda.max_memory_reserved(i) for i in allocated_on(cuda)), default=0)

    def memory(self) -> tuple[int, int] | None:
        cuda = self.cuda()
        if cuda is None:
            return None
        devices = allocated_on(cuda)
        return sum(cuda.memory_reserved(i) for i in devices), sum(cuda.memory_allocated(i) for i in devices)

    def finish(self) -> None:
        self.end()
