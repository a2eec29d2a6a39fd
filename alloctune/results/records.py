"""The records a sweep produces: what one trial measured, and in which state it ended.

Everything that crosses a process boundary or lands in a results file is one of these dataclasses, turned into
JSON with `to_json()` and read back with `from_json()`. The trials file carries `schema` on every line and a
reader refuses a version it does not know (`trials.py`).

The identities every layer shares live here too, once: the backend (`Backend`), a trial's key (`trial_key`), the
group one decision is made for (`decision_group`) and environment ids (`torch_env_id`, `sim_env_id`). The decision's
parameters and their defaults are decide/'s (`decide/parameters.py`); files record the values used.
"""
from __future__ import annotations

import enum
import functools
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, Protocol

from ..errors import ConfError
from ..settings.conf import AllocConf
from .alternation import Alternation
from .typed import Check, at_least, from_json, problem, within

SCHEMA_VERSION = 1

# What the typed reader checks beyond the type: each kind of figure within what a job can show (the writer never
# produces anything else: the rest is damage). The bounds keep every sum, product and ratio of figures read back
# finite: the speed model multiplies driver calls by their price (results/calibration.py) and divides by a step's
# time, which a figure of 1e308 or 5e-324 would take to infinity.
MAX_BYTES = 2**60        # an exbibyte: no device or host holds more
MAX_COUNT = 2**53        # calls, steps, repeats: each exact as a float
MAX_RATE = 1e18          # units a second: a petaflop/s reported as the throughput is 1e15
MAX_SECONDS = 1e9        # 32 years; a trial runs at most a week
LEAST_SECONDS = 1e-12    # below a clock's resolution: no time measured is shorter, but for none at all (0)
Bytes = Annotated[int, within(0, MAX_BYTES, "a byte count")]   # zero: a process that allocated nothing
Count = Annotated[int, within(0, MAX_COUNT, "a count")]
Rate = Annotated[float, within(0, MAX_RATE, "a rate")]
Seconds = Annotated[float, within(0, MAX_SECONDS, "a number of seconds", LEAST_SECONDS)]
Budget = Annotated[int, within(1, MAX_BYTES, "a budget in bytes")]   # a budget of no bytes fits nothing
Ratio = Annotated[float, at_least(0)]   # of two rates: any finite quotient of them


def is_rate(value: float) -> bool:
    """A throughput a job reported (a --metric-regex's numbers, alloctune.step's units) that a trial keeps: a Rate
    the typed reader takes back, and above 0 (no work done is no throughput)."""
    return problem(Rate, value) is None and value > 0


@functools.lru_cache(maxsize=4096)
def parsed(text: str) -> AllocConf:
    """The setting a record's `Conf` field names. Files keep the canonical string; it is parsed once, when the typed
    reader checks the field (`_conf_problem`), and every reader after takes this AllocConf (frozen: one is shared)
    through the records (`TrialRecord.setting`, `ChoiceRecord.setting`, `SweepInfo.settings`)."""
    return AllocConf.parse(text)


def _conf_problem(text: str) -> str | None:
    try:
        parsed(text)
    except ConfError as exc:
        return str(exc)
    return None


Conf = Annotated[str, Check(_conf_problem)]   # a PYTORCH_CUDA_ALLOC_CONF string that parses (`parsed`)


def _growth_problem(rows: list[list[int]]) -> str | None:
    """Rows [step, reserved bytes, allocated bytes], none negative, steps rising (decide/growth.py's samples)."""
    for row in rows:
        if len(row) != 3 or min(row) < 0:
            return f"expected [step, reserved, allocated] of non-negative integers, got {row!r}"
    for earlier, later in zip(rows, rows[1:]):
        if later[0] <= earlier[0]:
            return f"expected rising steps, got step {later[0]} after {earlier[0]}"
    return None


# The growth check's samples, as the start-up hook writes them (`runtime/peaks.ProcessReport`) and a trial keeps
# them (`Measurement`): one rule for both.
GrowthSamples = Annotated[list[list[int]], Check(_growth_problem)]


class Backend(str, enum.Enum):
    """How a sweep judges settings and, on a trial or a choice, where its figures come from."""

    AUTO = "auto"       # a sweep's request: CUDA where a GPU is visible, else SIM
    CUDA = "cuda"       # measured on the GPU
    SIM = "sim"         # replayed through the simulator
    HYBRID = "hybrid"   # a sweep that replays every setting, then measures the best few on the GPU

    def __str__(self) -> str:   # f-strings and messages show the value, as files hold it
        return self.value


SIM_PREFIX = "sim:"   # replayed results are kept apart from the measured ones of the same interpreter


def torch_env_id(version: str) -> str:   # an interpreter's id, as its probe names it, or a replayed torch's
    return f"torch-{version}"   # 'torch-2.11.0+cu130'


def sim_env_id(env_id: str) -> str:
    """The environment id of replays simulated as `env_id`'s torch (sweeper/plan.Plan.replay_env_id)."""
    return SIM_PREFIX + env_id


def measured_env_id(env_id: str) -> str:
    """The environment id a replay's is kept apart from (the interpreter's, or the torch's), or a measurement's."""
    return env_id.removeprefix(SIM_PREFIX)


def trial_key(workload_hash: str, conf: str, env_id: str, backend: str, budget_bytes: int | None, repeat: int,
              extra: bool) -> tuple[str | int | None, ...]:
    """Identity of a trial within a sweep: a resumed sweep runs only the keys it lacks. An extra trial (a command's
    recording) has a key of its own beside the planned repeat."""
    key = (workload_hash, conf, env_id, str(backend), budget_bytes, repeat)
    return key + ("extra",) if extra else key


class Grouped(Protocol):
    """A trial, a setting's result or a choice: anything that belongs to one decision group."""

    @property
    def env_id(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def budget_bytes(self) -> int | None: ...


def decision_group(item: Grouped) -> tuple[str, str, int | None]:
    """One decision is made per (environment, backend, budget): the group of a trial, setting or choice."""
    return (item.env_id, str(item.backend), item.budget_bytes)


class TrialState(str, enum.Enum):
    """How a trial ended. Only OK trials carry a complete measurement."""

    OK = "ok"
    OOM = "oom"            # the workload did not fit (device memory or budget): data, not an error
    CRASHED = "crashed"    # non-zero exit, exception, signal, unreadable child output
    TIMEOUT = "timeout"    # killed at the per-trial time limit
    MISMATCH = "mismatch"  # the allocator settings that took effect differ from those asked for

    @property
    def fits(self) -> bool:
        return self is TrialState.OK


@dataclass(frozen=True)
class Conditions:
    """What the machine did during a trial's measured pass: what explains an outlier (`steady.Observer`).
    Pairs are [at the start, at the end]; None where the figure could not be read."""

    device_allocs: int | None = None          # cudaMalloc calls inside the measured pass (0: the cache was warm)
    reserved_growth_bytes: int | None = None
    gc_collections: int | None = None         # Python GC collections inside the measured pass, and their time
    gc_seconds: Seconds | None = None
    cpu_seconds: Seconds | None = None        # this process's CPU time during the measured pass
    load_avg: list[float] | None = None       # the host's 1-minute load average
    cpu_count: int | None = None
    gpu_clock_mhz: list[int] | None = None    # SM clock
    gpu_temperature_c: list[int] | None = None
    gpu_other_processes: int | None = None    # compute processes on this GPU besides the trial
    gpu: str | None = None                    # which GPU: CUDA_VISIBLE_DEVICES and PCI bus id


class ThroughputSource(str, enum.Enum):
    """Where a trial's throughput comes from (a command's, in order of precedence; a workload's is its timed pass)."""

    TIMED_PASS = "timed_pass"            # a workload: the measured steps run again and timed (child/timing.py)
    METRIC_REGEX = "metric_regex"        # numbers the command printed
    STEP_MARKS = "step_marks"            # alloctune.step() in the user's code
    STEP_CALLS = "step_calls"            # returns of a named callable, or top-level forward calls (--step-on)
    OPTIMIZER_STEPS = "optimizer_steps"  # optimizer.step() calls, counted by the start-up hook
    WALL_TIME = "wall_time"              # the whole run's wall time: one run = one unit

    def __str__(self) -> str:
        return self.value


class DeviceMemorySource(str, enum.Enum):
    """What `device_peak_used_bytes` counts."""

    NVML = "nvml"            # the driver's figure for the trial's own processes
    BASELINE = "baseline"    # the device's total - free, less what it held just before the trial's process started
    DEVICE = "device"        # the device's total - free: every process on the GPU (records before 2026-12-01)

    def __str__(self) -> str:
        return self.value


PerStep = Annotated[float, within(0, MAX_BYTES, "a figure per step")]   # calls or bytes, a step


@dataclass(frozen=True)
class DriverWork:
    """The allocator's calls into the CUDA driver per steady-state step, counted by a replay (a prediction of what
    the job does under one setting, not a measurement). Averages over `steps` steps after the warm-up.

    What makes one setting slower than another is this work: cudaMalloc, cudaFree (which synchronises the
    device), mapping and unmapping pages of expandable segments, the free-everything-and-retry path, and garbage
    collection releasing cached blocks.
    """

    steps: Count                          # steady steps the averages are over (0: the trace has none)
    device_allocs: PerStep = 0.0          # cudaMalloc calls (a new segment)
    device_alloc_bytes: PerStep = 0.0
    device_frees: PerStep = 0.0           # cudaFree calls (a released segment; each synchronises the device)
    device_free_bytes: PerStep = 0.0
    maps: PerStep = 0.0                   # expandable segments: page ranges mapped (cuMemMap)
    map_bytes: PerStep = 0.0
    unmaps: PerStep = 0.0                 # page ranges unmapped (cuMemUnmap, after a device synchronisation)
    unmap_bytes: PerStep = 0.0
    # device-wide synchronisations: each release (empty_cache, the retry path, an oversize release, a GC pass that
    # freed) waits for the device once, however many cudaFree / unmap calls it then makes
    syncs: PerStep = 0.0
    alloc_retries: PerStep = 0.0          # the free-everything-and-retry path taken
    gc_passes: PerStep = 0.0              # garbage-collection passes that released cached blocks
    # True: the trace marks no steady step (no step marks, or none after the warm-up); `steps` is 0 and the
    # figures are the whole run's totals, start-up and teardown included
    whole_run: bool = False

    @classmethod
    def from_json(cls, data: object, where: str = "driver work") -> "DriverWork":
        return from_json(cls, data, where)

    @property
    def calls(self) -> float:
        """Driver calls per step, of every kind."""
        return self.device_allocs + self.device_frees + self.maps + self.unmaps


@dataclass(frozen=True)
class Measurement:
    """What one trial measured. Names follow torch.cuda.memory_stats where one exists.

    Peaks are over the whole process (warm-up included): that is what the job needs from the card.
    Throughput is over the measured steps only, synchronized, after warm-up. Simulated trials have no
    throughput and no driver-level figure.
    """

    peak_reserved_bytes: Bytes
    peak_allocated_bytes: Bytes
    peak_requested_bytes: Bytes | None = None
    num_alloc_retries: Count = 0
    num_ooms: Count = 0
    num_device_alloc: Count | None = None
    num_device_free: Count | None = None
    device_peak_used_bytes: Bytes | None = None  # cudaMemGetInfo's view: includes the CUDA context
    throughput: Rate | None = None             # workload units per second
    unit: str | None = None
    measured_seconds: Seconds | None = None
    measured_steps: Count | None = None
    # Steady-state timing (absent in records from before it): `throughput` is over a second, timed pass over the
    # measured steps; `warm_throughput` is their first run, in the warm pass (first-seen shapes, cache growth).
    warm_throughput: Rate | None = None
    block_seconds: list[Seconds] | None = None   # the measured pass in CUDA-synchronised blocks of steps
    block_units: list[float] | None = None
    conditions: Conditions | None = None
    # Absent in older records (their device figure is DEVICE, their throughput a timed pass or, for a command, as
    # its record's unit says).
    device_memory_source: DeviceMemorySource | None = None
    overhead_bytes: Bytes | None = None          # device memory held outside the allocator (CUDA context, libraries)
    throughput_source: ThroughputSource | None = None
    ended_by_window: bool = False                # a command stopped by the hook after its --steps window
    auto_window: bool = False                    # that window was the automatic one of a confirmation trial: its
                                                 # memory is confirmed for the steps it ran, not the whole run
    peak_rising: bool | None = None              # peak reserved still rose in the window's last fifth
    # A confirmation kept running to the step in which its setting's replay peaked (its memory covers that peak)
    held_to_step: Count | None = None
    # The growth check (`sweep --check-growth K`): [step, reserved, allocated] of one process at steps K and 2K,
    # written by the start-up hook into its per-process file and put here by the parent (trial/command.py), of
    # the process that peaked; [] when asked but the job ended before step K; None when not asked.
    growth_samples: GrowthSamples | None = None
    driver_work: DriverWork | None = None        # replayed: driver calls per steady step (None: GPU trial, older)
    steps_before_peak: Count | None = None       # replayed: whole steps ended when peak reserved was first reached
    # A trial that alternated its setting with another inside its process (an in-process confirmation): the timed
    # blocks. Its peaks are then its own setting's part (up to the end of its first block, before the first
    # switch), and its throughput its own blocks' rate. None for every other trial.
    alternation: Alternation | None = None

    @classmethod
    def from_json(cls, data: object, where: str = "measurement") -> "Measurement":
        """Checked field by field; unknown keys are ignored and missing optional ones take their defaults."""
        return from_json(cls, data, where)

    @property
    def reserved_ratio(self) -> float | None:
        """peak reserved / peak allocated (1.0 = no waste)."""
        return self.peak_reserved_bytes / self.peak_allocated_bytes if self.peak_allocated_bytes else None

    @property
    def fragmentation(self) -> float | None:
        """1 - peak allocated / peak reserved."""
        return 1 - self.peak_allocated_bytes / self.peak_reserved_bytes if self.peak_reserved_bytes else None


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: one setting, one repeat, one environment, in a fresh process (or one replay)."""

    workload: str                 # workload name
    workload_hash: str            # digest of what defines the workload; rows with different hashes don't compare
    conf: Conf                    # canonical PYTORCH_CUDA_ALLOC_CONF ('' = the default)
    repeat: Count                 # 0-based repeat index
    env_id: str                   # which interpreter/torch ran it, e.g. 'torch-2.11.0+cu130'
    backend: Backend              # CUDA (measured) or SIM (replayed trace)
    state: TrialState
    measurement: Measurement | None = None
    budget_bytes: Budget | None = None
    error: str | None = None      # last lines of the child's error, for CRASHED/TIMEOUT/MISMATCH/OOM; on an OK
    #                               trial, why the figure the job gave is no throughput (trial/command.timing)
    effective_conf: str | None = None  # the settings the child read back after the allocator started
    wall_seconds: Seconds | None = None  # the whole process, start to exit
    started_at: str | None = None      # ISO 8601, UTC
    env: dict[str, Any] = field(default_factory=dict)  # provenance: torch, cuda, driver, gpu, python, host, ...
    node: str | None = None            # host that ran the trial child (absent in records before it was kept)
    gpus: str | None = None            # CUDA_VISIBLE_DEVICES the child got: the GPU ids it ran on
    retried: str | None = None         # why a first attempt was lost (its Ray worker or node died), if one was
    # This trial recorded the allocation trace: a hybrid sweep's default, repeat 0. It counts as that repeat (same
    # key): its peaks are the first pass's, which recording does not change (peak reserved byte-identical to an
    # unrecorded default's in three H200 jobs), and its throughput is the timed pass, run after recording stopped.
    # Provenance only, except in folders from before it counted, which also hold an unrecorded repeat 0
    # (`decide.summary.counted`), and for a command, where recording covers the whole run (`extra`).
    recording: bool = False
    # A trial beside the planned repeats, with a key of its own, left out of statistics: a command's recording
    # trial (its throughput is that of a recorded run: 8% low on the H200), the default being measured again.
    extra: bool = False
    # A command trial's figures per process that used CUDA (one row per process and device: pid, rank, device,
    # peaks, retries, OOMs); the measurement holds the maximum over them. None for workload trials.
    processes: list | None = None
    # The allocator-sensitive features any process of the trial used (settings/known.py's Feature values), as the
    # start-up hook observed them; None where nothing observed (workload trials, records before it was kept).
    features: list[str] | None = None
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", Backend(self.backend))

    @property
    def setting(self) -> AllocConf:
        return parsed(self.conf)

    @property
    def key(self) -> tuple[str | int | None, ...]:
        """Identity of a trial within a sweep (`trial_key`): a resumed sweep skips keys already recorded."""
        return trial_key(self.workload_hash, self.conf, self.env_id, self.backend, self.budget_bytes, self.repeat,
                         self.extra)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value, "backend": self.backend.value}

    @classmethod
    def from_json(cls, data: object, where: str = "trial record") -> "TrialRecord":
        """Checked field by field (`typed.from_json`): damage is one ResultsError naming `where` and the field."""
        return from_json(cls, data, where)


# What one trial line carries at most (trials.MAX_LINE_BYTES holds it, each character escaped): the end of an error
# (the last lines of a job's stderr, a traceback's end), and the rows of the processes that peaked highest, when a
# command started thousands that used CUDA; the measurement is the maximum over all of them either way.
MAX_ERROR_CHARS = 16_000
MAX_PROCESS_ROWS = 1_000


def fitted(record: TrialRecord) -> TrialRecord:
    """`record` within what a trial line carries (MAX_ERROR_CHARS, MAX_PROCESS_ROWS): the trials file's writer
    keeps every trial within the line a reader takes."""
    error, rows = record.error, record.processes
    if error is not None and len(error) > MAX_ERROR_CHARS:
        error = "..." + error[-MAX_ERROR_CHARS:]
    if rows is not None and len(rows) > MAX_PROCESS_ROWS:
        peaks = [row.get("peak_reserved_bytes") or 0 for row in rows]
        kept = set(sorted(range(len(rows)), key=peaks.__getitem__, reverse=True)[:MAX_PROCESS_ROWS])
        rows = [row for i, row in enumerate(rows) if i in kept]
    return record if error is record.error and rows is record.processes else replace(record, error=error,
                                                                                       processes=rows)


def process_name(row: dict) -> str:
    """One process of a command trial (a row of `TrialRecord.processes`): 'rank 1', else 'pid 4242'."""
    return f"rank {row['rank']}" if row.get("rank") is not None else f"pid {row.get('pid')}"


def peak_row(rows: list[dict]) -> dict | None:
    """Of a command trial's rows (`TrialRecord.processes`), the process (and device) with the highest peak
    reserved: the one that decides whether the job fits."""
    return max(rows, key=lambda r: r.get("peak_reserved_bytes") or 0, default=None)


# A row's figures: names both `Measurement` and the hook's per-device peaks (`runtime.peaks.DevicePeaks`) have.
_ROW_FIGURES = ("peak_reserved_bytes", "peak_allocated_bytes", "peak_requested_bytes", "num_alloc_retries", "num_ooms",
                "device_peak_used_bytes", "overhead_bytes", "device_memory_source")


def process_row(pid: int | None, rank: int | None, device: int, figures: Any) -> dict:
    """One row of `TrialRecord.processes`: a process (by pid and rank), a device it allocated on, and that device's
    figures, read off `figures` (a measured device's peaks, or a replay's `Measurement`)."""
    return {"pid": pid, "rank": rank, "device": device, **{k: getattr(figures, k) for k in _ROW_FIGURES}}
