"""What of a device belongs to a process, and the budget per device (`runtime/devices.py`), against stand-ins for
torch.cuda and nvidia-ml-py: which figure is used when NVML lists the process, when it does not (a PID namespace),
when it gives no figure, and without NVML; what the sampler keeps and what
the step counter reads of the devices. The real NVML is tests/trial/test_window_gpu.py's."""
from __future__ import annotations

from types import SimpleNamespace

from alloctune.results.records import DeviceMemorySource
from alloctune.runtime.devices import Budget, CudaJob, DeviceMemory, Sampler, peaks, process_memory, set_budget
from alloctune.runtime.peaks import DeviceBudget

GiB = 2**30
ME = 4242


class FakeNvml:
    """Two GPUs; `used` is each device's used memory, `procs` the compute processes NVML lists on each."""

    def __init__(self, used, procs):
        self.used = used
        self.procs = procs

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=self.used[handle], total=80 * GiB, free=80 * GiB - self.used[handle])

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.procs.get(handle, [])]


class FakeCuda:
    def __init__(self, nvml=None, count=2, handler=True, total=80 * GiB):
        self.pynvml = nvml
        if handler:
            self._get_pynvml_handler = lambda device: f"gpu{device}"
        self.count = count
        self.total = total
        self.free = {i: total - 3 * GiB for i in range(count)}
        self.fractions: dict[int, float] = {}

    def device_count(self):
        return self.count

    def mem_get_info(self, device):
        return self.free[device], self.total

    def get_device_properties(self, device):
        return SimpleNamespace(total_memory=self.total)

    def set_per_process_memory_fraction(self, fraction, device):
        self.fractions[device] = fraction

    def get_per_process_memory_fraction(self, device):
        return self.fractions[device]


def _memory(used, procs, **kw):
    nvml = FakeNvml(used, procs)
    return DeviceMemory(FakeCuda(nvml, **kw), pid=ME), nvml


def test_nvml_counts_this_process_alone():
    memory, nvml = _memory({"gpu0": 10 * GiB, "gpu1": 1 * GiB}, {"gpu0": [(7, 8 * GiB), (ME, 2 * GiB)]})
    assert memory.baseline == {0: 10 * GiB, 1: 1 * GiB}   # read when it was made: at CUDA init
    nvml.used["gpu0"] += 30 * GiB                          # a neighbour grows: not ours
    nvml.procs["gpu0"] = [(7, 38 * GiB), (ME, 3 * GiB)]
    assert memory.used(0) == (3 * GiB, DeviceMemorySource.NVML)


def test_a_pid_the_driver_does_not_list_falls_back_to_the_baseline_for_good():
    """In a container the driver lists host pids: ours is not found, so the device's growth since CUDA init."""
    memory, nvml = _memory({"gpu0": 10 * GiB, "gpu1": 0}, {"gpu0": [(99999, 5 * GiB)]})
    nvml.used["gpu0"] = 15 * GiB
    assert memory.used(0) == (5 * GiB, DeviceMemorySource.BASELINE)
    nvml.procs["gpu0"] = [(ME, 1 * GiB)]   # listed later: the device keeps the one source its peak began with
    assert memory.used(0) == (5 * GiB, DeviceMemorySource.BASELINE)
    nvml.used["gpu0"] = 9 * GiB            # less than at start (a neighbour left): never below zero
    assert memory.used(0) == (0, DeviceMemorySource.BASELINE)


def test_no_figure_for_the_pid_is_the_baseline_and_a_lost_listing_is_no_sample():
    memory, nvml = _memory({"gpu0": 1 * GiB, "gpu1": 0}, {"gpu0": [(ME, None)]})   # nvidia-ml-py: N/A -> None
    nvml.used["gpu0"] = 4 * GiB
    assert memory.used(0) == (3 * GiB, DeviceMemorySource.BASELINE)
    nvml.procs["gpu1"] = [(ME, 2 * GiB)]
    assert memory.used(1) == (2 * GiB, DeviceMemorySource.NVML)
    nvml.procs["gpu1"] = []
    assert memory.used(1) is None   # not a figure of another kind in an NVML peak


def test_without_nvml_the_figure_is_the_whole_device():
    cuda = FakeCuda(nvml=None)
    memory = DeviceMemory(cuda, pid=ME)
    assert memory.used(1) == (3 * GiB, DeviceMemorySource.DEVICE) and memory.sources == {1: DeviceMemorySource.DEVICE}
    without_handler = DeviceMemory(FakeCuda(FakeNvml({}, {}), handler=False), pid=ME)   # an older torch
    assert without_handler.used(0) == (3 * GiB, DeviceMemorySource.DEVICE)


def test_a_device_nvml_cannot_read_is_the_whole_device():
    class Broken(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle):
            if handle == "gpu1":
                raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
            return super().nvmlDeviceGetMemoryInfo(handle)

    memory = DeviceMemory(FakeCuda(Broken({"gpu0": 0}, {"gpu0": [(ME, GiB)]})), pid=ME)
    assert memory.used(0) == (GiB, DeviceMemorySource.NVML)
    assert memory.used(1) == (3 * GiB, DeviceMemorySource.DEVICE)


def test_process_memory_survives_an_nvml_error():
    class Failing(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, handle):
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    assert process_memory(Failing({}, {}), "gpu0", ME) is None


def test_the_budget_per_device_and_its_read_back():
    cuda = FakeCuda(total=80 * GiB)
    assert set_budget(cuda, 1, 0.25) == DeviceBudget(1, 0.25, 0.25) and cuda.fractions == {1: 0.25}

    class NoReadBack(FakeCuda):   # a torch without get_per_process_memory_fraction
        get_per_process_memory_fraction = None

    assert set_budget(NoReadBack(), 0, 0.5) == DeviceBudget(0, 0.5, None)


def test_the_budget_goes_on_each_device_the_process_uses_once_and_nowhere_else():
    """Two GPUs visible, the process uses GPU 1 (another rank's job is on GPU 0): GPU 0 gets no budget, so no
    context from it; a second use of GPU 1 (the sampler seeing it again) sets nothing."""
    cuda = FakeCuda(total=80 * GiB)
    budget = Budget(cuda, 40 * GiB, None)
    budget.use(1)
    budget.use(1)
    assert cuda.fractions == {1: 0.5} and budget.set == [DeviceBudget(1, 0.5, 0.5)]
    budget.use(0)
    assert budget.set == [DeviceBudget(1, 0.5, 0.5), DeviceBudget(0, 0.5, 0.5)]
    fraction = Budget(FakeCuda(), None, 0.25)
    fraction.use(0)
    assert fraction.set == [DeviceBudget(0, 0.25, 0.25)]


class AllocatingCuda(FakeCuda):
    """FakeCuda with the allocator's side: `reserved`/`allocated` per device, a current device, the peaks."""

    def __init__(self, nvml, reserved, allocated=None, **kw):
        super().__init__(nvml, **kw)
        self.reserved = reserved
        self.allocated = allocated or {}
        self.current = 0
        self.devices_set: list[int] = []
        self.synchronized: list[int] = []

    def memory_reserved(self, device):
        return self.reserved.get(device, 0)

    def memory_allocated(self, device):
        return self.allocated.get(device, 0)

    def max_memory_reserved(self, device):
        return 2 * self.reserved.get(device, 0)

    def set_device(self, device):
        self.current = device
        self.devices_set.append(device)

    def current_device(self):
        return self.current

    def synchronize(self, device):
        self.synchronized.append(device)

    def memory_stats(self, device):
        reserved = self.reserved.get(device, 0)
        return {"reserved_bytes.all.peak": reserved, "allocated_bytes.all.peak": reserved // 2} if reserved else {}


def test_the_sampler_keeps_the_most_used_and_outside_the_allocator_on_the_devices_allocated_on():
    """The process allocated on GPU 1 only (the program's device is 1): GPU 0 is never touched, GPU 1 gets the
    budget at its first reading; the peak and the overhead are the most over readings; at exit the program's
    device is current again."""
    nvml = FakeNvml({"gpu0": 0, "gpu1": 0}, {"gpu1": [(ME, 5 * GiB)]})
    cuda = AllocatingCuda(nvml, reserved={1: 4 * GiB}, total=80 * GiB)
    budget = Budget(cuda, 40 * GiB, None)
    sampler = Sampler(cuda, DeviceMemory(cuda, pid=ME), budget)
    cuda.current = 1
    sampler.sample()
    nvml.procs["gpu1"] = [(ME, 3 * GiB)]   # fell: the peak stays
    cuda.reserved[1] = 1 * GiB              # its overhead is now 2 GiB, above the first reading's 1 GiB
    sampler.last()
    assert sampler.peak == {1: 5 * GiB} and sampler.overhead == {1: 2 * GiB}
    assert set(cuda.devices_set) == {1} and cuda.current == 1 and sampler.stop.is_set()
    assert budget.set == [DeviceBudget(1, 0.5, 0.5)] and cuda.fractions == {1: 0.5}
    [device] = peaks(cuda, sampler)
    assert (device.device, device.peak_reserved_bytes, device.device_peak_used_bytes, device.overhead_bytes,
            device.device_memory_source) == (1, 1 * GiB, 5 * GiB, 2 * GiB, DeviceMemorySource.NVML)
    [unsampled] = peaks(cuda, None)   # no sampler (CUDA initialisation failed part-way): the allocator's alone
    assert unsampled.device_peak_used_bytes is None and unsampled.device_memory_source is None


def test_the_sampling_thread_stops_when_asked():
    cuda = AllocatingCuda(None, reserved={0: GiB})
    sampler = Sampler(cuda, DeviceMemory(cuda, pid=ME), None)
    sampler.start()
    sampler.stop.set()
    assert sampler.stopped.wait(10)
    assert sampler.peak.get(0, 3 * GiB) == 3 * GiB   # the device-wide figure (no NVML), if it sampled at all


def test_the_counters_job_reads_only_the_devices_allocated_on_and_nothing_before_cuda():
    cuda = AllocatingCuda(None, reserved={0: 3 * GiB, 1: 0}, allocated={0: GiB})
    ended = []
    job = CudaJob(lambda: cuda, lambda: ended.append(True))
    assert job.memory() == (3 * GiB, GiB) and job.reserved_peak() == 6 * GiB
    job.synced()
    assert cuda.synchronized == [0]
    job.finish()
    assert ended == [True]
    before = CudaJob(lambda: None, lambda: None)
    assert before.memory() is None and before.reserved_peak() is None and before.synced() > 0
