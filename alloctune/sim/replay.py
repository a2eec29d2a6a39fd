"""Replay one trace under many settings, spread over CPU cores, and find the smallest card each setting fits.

`replay` returns one `ReplayOutcome` per setting, in the order given; `replay_many` does so for several traces and
limits through one pool of workers. A setting the simulator cannot model
(`backend:cudaMallocAsync`: the driver's pool is not block by block) comes back with `result=None` and the
reason, so one such setting never sinks a grid.

`min_memory` answers "will it fit on a 24 / 40 / 80 GiB card, and with which setting": the smallest device
memory at which the trace runs with no OOM, and the smallest at which it also needs no release-and-retry
(each retry frees the cache and synchronizes the device: a hidden slowdown). Sizes are searched in steps of
`granularity` (2 MiB by default, the allocator's own segment rounding), so answers are exact to that step.

- No retry, exactly, without search: when no memory limit is in force (no per_process_memory_fraction; the
  search has no budget) and the oversize release cannot act (no max_split_size_mb, or expandable segments,
  which it skips), the smallest device without a retry is the unlimited run's peak reserved plus the
  overhead, rounded up to the step. Proof: on a larger device no cudaMalloc (or page map) fails, so the run
  is the unlimited one. On a smaller one the run is the unlimited one up to the first request that takes
  reserved + overhead past the device (until then no device call fails, nothing is released, and no
  address is given back, so segments are placed alike and best fit picks alike; an expandable segment's
  virtual size depends on the device, but a request finds no room in one only when mapping it would pass
  the device anyway), and that request fails: with GC off and nothing oversize to release, the next step
  is the full release and the retry. tests/sim/test_sim_replay.py checks this against the bisection on
  real traces.
- Otherwise the search bisects, which assumes that more memory never hurts. The allocator does not promise
  that (with more room it may split a different block), so each answer is then checked over the next few
  steps up, and the bisection resumes above any size that fails there; `Capacity.monotone` says whether
  that happened. Each probe replays only until its answer is known: to the first OOM, or, when only
  retries matter, to the first retry.

`progress(done, total)` is called as settings finish, in `replay`, `replay_many` (each setting under each run) and
`min_memory_many`.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from ..errors import AlloctuneError, ConfError, shown
from ..processes import die_with_parent
from ..results.order import by_memory
from ..results.records import Measurement
from ..results.vocabulary import SETTING, SIMULATED_TORCH, Basis, figures
from ..settings.conf import AllocConf
from ..units import MiB, format_bytes, size_argument
from .config import allocator_config
from .limits import DEFAULT_OVERHEAD
from .simulate import SimResult, pack, simulate
from .steady import SteadyWindow, steady_window
from .target import simulated_torch
from .trace import Trace, load_trace

GRANULARITY = 2 * MiB
VERIFY_STEPS = 8  # sizes checked above a bisection answer before it is trusted


@dataclass(frozen=True)
class ReplayOutcome:
    """One setting's replay: `result` is None when the setting cannot be simulated, and `reason` says why."""

    setting: AllocConf
    result: SimResult | None
    reason: str | None = None
    torch_version: str | None = None   # whose allocator the simulator followed ('2.11'; None: not simulated)

    @property
    def conf(self) -> str:
        """The setting as tables show it ('default' for the default)."""
        return self.setting.label

    @property
    def simulated(self) -> bool:
        return self.result is not None

    @property
    def fits(self) -> bool:
        return self.result is not None and self.result.num_ooms == 0

    def sort_key(self) -> tuple:
        """Rank (`results/order.by_memory`): simulated before not, fits before OOM, then lowest peak reserved, then
        the simpler setting."""
        r = self.result
        return by_memory(self.setting, None if r is None else self.fits, 0 if r is None else r.peak_reserved_bytes)

    def measurement(self) -> Measurement | None:
        """The simulated peaks as a `Measurement` (no throughput: replay has no clock)."""
        r = self.result
        if r is None:
            return None
        return Measurement(peak_reserved_bytes=r.peak_reserved_bytes, peak_allocated_bytes=r.peak_allocated_bytes,
                           peak_requested_bytes=r.peak_requested_bytes, num_alloc_retries=r.num_alloc_retries,
                           num_ooms=r.num_ooms, num_device_alloc=r.num_device_alloc,
                           num_device_free=r.num_device_free, driver_work=r.driver_work,
                           steps_before_peak=r.steps_before_peak)

    def to_json(self) -> dict:
        r = self.result
        if r is None:
            return {SETTING: self.conf, "simulated": False, "reason": self.reason}
        out = {**figures(self.conf, Basis.REPLAYED, self.fits, r.peak_reserved_bytes, r.peak_allocated_bytes),
               "simulated": True, SIMULATED_TORCH: self.torch_version}
        out.update(peak_requested_bytes=r.peak_requested_bytes, num_alloc_retries=r.num_alloc_retries,
                   num_ooms=r.num_ooms, num_device_alloc=r.num_device_alloc, num_device_free=r.num_device_free,
                   first_oom_index=r.first_oom_index, steps_before_peak=r.steps_before_peak,
                   driver_work=None if r.driver_work is None else asdict(r.driver_work))
        return out


@dataclass(frozen=True)
class Capacity:
    """Smallest device memory (bytes, overhead included) without OOM, and without release-and-retry either."""

    conf: str
    fits_bytes: int | None          # None: not simulated, no fit up to 1 PiB (`reason` says which), or not searched
    no_retry_bytes: int | None
    granularity: int = GRANULARITY
    monotone: bool = True           # False: some larger size failed where bisection expected success
    reason: str | None = None


Progress = Callable[[int, int], None]  # (settings done, settings in all)


def replay(trace: Trace | str | os.PathLike, confs: Sequence[AllocConf | str], device_memory: int, *, budget_bytes: int | None = None,
           overhead_bytes: int | None = None, jobs: int | None = None,
           torch_version: str | None = None, progress: Progress | None = None) -> list[ReplayOutcome]:
    """Simulate `trace` under each setting. `overhead_bytes` defaults to what the trace's meta recorded
    (memory the CUDA context held outside the allocator), else DEFAULT_OVERHEAD. `torch_version` (whose
    allocator behaviour to follow) defaults to the recording's. `jobs` defaults to the usable cores. A single
    setting may be given as a string. Each result counts the driver work per steady step of the trace
    (`steady.py`), or over the whole run where it marks none. `trace`: a Trace (`load_trace`'s) or its path;
    sizes in bytes or as '24GiB'."""
    trace = trace if isinstance(trace, Trace) else load_trace(trace)
    return replay_many([(trace, device_memory, budget_bytes)], confs, overhead_bytes=overhead_bytes, jobs=jobs,
                       torch_version=torch_version, progress=progress)[0]


def replay_many(runs: Sequence[tuple[Trace, int, int | None]], confs: Sequence[AllocConf | str], *,
                overhead_bytes: int | None = None, jobs: int | None = None, torch_version: str | None = None,
                progress: Progress | None = None) -> list[list[ReplayOutcome]]:
    """`replay` of each (trace, device_memory, budget_bytes) of `runs` under every setting, all through one pool
    of workers (a pool's start costs more than a small trace's replays): one list of outcomes per run, in order."""
    confs = [confs] if isinstance(confs, str) else confs   # not its characters, one setting each
    if torch_version is not None and not isinstance(torch_version, str):
        raise ConfError(f"torch_version: expected a version such as '2.11.0', got {shown(torch_version)}")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise AlloctuneError(f"jobs: expected a number of processes of at least 1, got {shown(jobs)}")
    traces = list({id(trace): trace for trace, _, _ in runs}.values())   # each sent to a worker once
    where = {id(trace): i for i, trace in enumerate(traces)}
    run_args = [(where[id(trace)], _replay_args(trace, device_memory, budget_bytes, overhead_bytes, torch_version))
                for trace, device_memory, budget_bytes in runs]
    settings = [_parse(c) for c in confs]
    outcomes = _map(_replay_one, [(t, conf, args) for t, args in run_args for conf in settings], traces, jobs,
                    progress)
    n = len(settings)
    return [outcomes[i * n:(i + 1) * n] for i in range(len(runs))]


def min_memory(trace: Trace, conf: AllocConf | str, *, overhead_bytes: int | None = None,
               granularity: int = GRANULARITY) -> Capacity:
    """Smallest device memory at which `trace` runs under `conf` without OOM, and without retries."""
    args = _Args(0, None, _overhead(trace, overhead_bytes), _torch_version(trace), granularity)
    return _capacity_one(pack(trace), _parse(conf), args)


def min_memory_many(trace: Trace, confs: Sequence[AllocConf | str], *, overhead_bytes: int | None = None,
                    granularity: int = GRANULARITY, jobs: int | None = None, torch_version: str | None = None,
                    progress: Progress | None = None, no_retry_only: bool = False) -> list[Capacity]:
    """`min_memory` for each setting, spread over cores like `replay` (and, like it, as `torch_version`);
    `no_retry_only`: the smallest size without a retry alone, `fits_bytes` not searched (None), as fit needs it."""
    version = simulated_torch(torch_version) if torch_version else _torch_version(trace)
    args = _Args(0, None, _overhead(trace, overhead_bytes), version, granularity, no_retry_only=no_retry_only)
    return _map(_capacity_one, [(0, _parse(c), args) for c in confs], [trace], jobs, progress)


def measured_runs(trace: Trace) -> dict[str, dict]:
    """What the trace's meta says was measured on the GPU, by setting label: to set predictions beside."""
    runs = trace.meta.get("measured") or []
    return {AllocConf.parse(m.get("conf")).label: m for m in runs if isinstance(m, dict)}


def measured_under(trace: Trace, device_memory: int, budget_bytes: int | None) -> dict[str, dict]:
    """`measured_runs` taken under the conditions of a replay (the same device memory and budget): only those
    may stand beside its predictions. A measurement that does not say its budget ran without one."""
    recorded_device = trace.meta.get("device_total_bytes")
    return {label: m for label, m in measured_runs(trace).items()
            if m.get("budget_bytes") == budget_bytes
            and ((m.get("env") or {}).get("gpu_memory") or recorded_device) == device_memory}


# ---- internals ----

@dataclass(frozen=True)
class _Args:
    device_memory: int
    budget_bytes: int | None
    overhead_bytes: int
    torch_version: str
    granularity: int = GRANULARITY
    window: SteadyWindow | None = None   # the steady steps replay counts the driver work over
    step_ends: tuple[int, ...] = ()      # the trace's, where the replay notes the step of its peak reserved
    no_retry_only: bool = False          # a capacity's smallest size without a retry alone (`min_memory_many`)


def _parse(conf: AllocConf | str) -> AllocConf:
    if not isinstance(conf, (AllocConf, str)):
        raise ConfError(f"a setting is a str such as 'expandable_segments:True' or an AllocConf, got {shown(conf)}")
    return conf if isinstance(conf, AllocConf) else AllocConf.parse(conf)


def _replay_args(trace: Trace, device_memory: int, budget_bytes: int | None, overhead_bytes: int | None,
                 torch_version: str | None) -> _Args:
    """A replay's conditions, its sizes checked: bytes or '24GiB'."""
    version = simulated_torch(torch_version) if torch_version else _torch_version(trace)
    return _Args(size_argument(device_memory, "device_memory"),
                 None if budget_bytes is None else size_argument(budget_bytes, "budget_bytes"),
                 _overhead(trace, None if overhead_bytes is None else size_argument(overhead_bytes, "overhead_bytes",
                                                                                    least=0)), version,
                 window=steady_window(trace.meta), step_ends=tuple(trace.meta.get("step_ends") or ()))


def _overhead(trace: Trace, overhead_bytes: int | None) -> int:
    if overhead_bytes is not None:
        return overhead_bytes
    recorded = trace.meta.get("overhead_bytes")
    return DEFAULT_OVERHEAD if recorded is None else int(recorded)


def _torch_version(trace: Trace) -> str:
    return simulated_torch(trace.meta.get("torch_version"))


def _not_simulated(conf: AllocConf) -> str | None:
    if conf.is_async:
        return ("the CUDA driver's pool holds its memory, which the simulator does not model block by block: "
                "measure it on the GPU")
    return None


def _simulate(ops: Any, conf: AllocConf, device_memory: int, args: _Args, stop_at_retry: bool = False) -> SimResult:
    return simulate(ops, conf, device_memory, budget_bytes=args.budget_bytes, overhead_bytes=args.overhead_bytes,
                    torch_version=args.torch_version, stop_at_retry=stop_at_retry, window=args.window,
                    step_ends=args.step_ends)


def _replay_one(ops: Any, conf: AllocConf, args: _Args) -> ReplayOutcome:
    reason = _not_simulated(conf)
    if reason:
        return ReplayOutcome(conf, None, reason)
    try:
        return ReplayOutcome(conf, _simulate(ops, conf, args.device_memory, args), torch_version=args.torch_version)
    except ConfError as exc:  # a setting the simulator refuses: report it, keep the grid going
        return ReplayOutcome(conf, None, str(exc))


def _capacity_one(ops: Any, conf: AllocConf, args: _Args) -> Capacity:
    reason = _not_simulated(conf)
    if reason:
        return Capacity(conf.label, None, None, args.granularity, reason=reason)
    step = args.granularity
    try:
        # With unlimited memory nothing is ever released or retried; its peak (plus the overhead) fits.
        unlimited = _simulate(ops, conf, 1 << 60, args)
    except ConfError as exc:
        return Capacity(conf.label, None, None, step, reason=str(exc))
    hi = -(-(unlimited.peak_reserved_bytes + args.overhead_bytes) // step) * step
    # Less than the peak of live requested bytes cannot work under any setting: the bisection starts there.
    lo = (unlimited.peak_requested_bytes + args.overhead_bytes - 1) // step * step
    complete: dict[int, SimResult] = {}   # replays that ran to the end or to their OOM
    no_retry_seen: dict[int, bool] = {}   # whether a replay got through without any retry

    def fits(size: int) -> bool:
        if size not in complete:
            complete[size] = _simulate(ops, conf, size, args)
            no_retry_seen[size] = complete[size].first_retry_index is None
        return complete[size].num_ooms == 0

    def without_retry(size: int) -> bool:
        if size not in no_retry_seen:
            result = _simulate(ops, conf, size, args, stop_at_retry=True)
            no_retry_seen[size] = result.first_retry_index is None
            if no_retry_seen[size]:  # it ran to the end: it answers `fits` too
                complete[size] = result
        return no_retry_seen[size]

    no_retry: int | None
    if no_retry_is_unlimited_peak(conf, args.torch_version):
        no_retry, retry_monotone = hi, True
    else:
        no_retry, retry_monotone = _smallest(without_retry, lo, hi, step)
    if args.no_retry_only:
        return Capacity(conf.label, None, no_retry, step, retry_monotone)
    # A size without retries has no OOM either: the smallest that fits is at most that.
    smallest_fit, fits_monotone = _smallest(fits, lo, no_retry or hi, step)
    reason = None if smallest_fit else f"does not fit in {format_bytes(_SEARCH_LIMIT)}"
    return Capacity(conf.label, smallest_fit, no_retry, step, fits_monotone and retry_monotone, reason)


def no_retry_is_unlimited_peak(conf: AllocConf, torch_version: str) -> bool:
    """Whether the smallest device without a retry is exactly the unlimited peak reserved plus the overhead
    (see the module's docstring for the proof): no memory limit, and no oversize release that could act."""
    limit = allocator_config(conf, 1 << 60, torch_version=torch_version).allowed
    return limit is None and (not conf.max_split_size_mb or bool(conf.expandable_segments))


def _smallest(ok: Callable[[int], bool], lo: int, hi: int, step: int) -> tuple[int | None, bool]:
    """Smallest multiple of `step` with ok(size), given that `lo` fails and `hi` is the first guess to pass;
    None if nothing up to 1 PiB does.

    Returns (size, monotone): monotone is False when a size above a bisection answer failed.
    """
    hi = max(hi, lo + step)
    # Gallop up from `lo` first: a size that fails costs a replay to its first OOM or retry, often a short
    # one, while a size that passes costs the whole trace; so try the small sizes before halving from `hi`.
    gap = step
    while lo + gap < hi and not ok(lo + gap):
        lo, gap = lo + gap, gap * 2
    if lo + gap < hi:
        hi = lo + gap
    while not ok(hi):  # `hi` fits unless a memory fraction or GC scales with the device: look higher
        if hi > _SEARCH_LIMIT:
            return None, True
        lo, hi = hi, hi * 2
    monotone = True  # invariant: lo fails, hi passes
    while True:
        while hi - lo > step:
            mid = (lo + hi) // 2 // step * step
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        failing = next((s for s in range(hi + step, hi + (VERIFY_STEPS + 1) * step, step) if not ok(s)), None)
        if failing is None:
            return hi, monotone
        monotone, lo, offset = False, failing, step
        while not ok(failing + offset):
            offset *= 2
        hi = failing + offset


_SEARCH_LIMIT = 1 << 50


# Worker processes receive the traces once, through the pool initializer, not with every task.
_worker_traces: list[Any] = []


def _init_worker(traces: list[Trace]) -> None:
    global _worker_traces
    die_with_parent()  # an orphaned worker would hold ~120 MB and the parent's stdout (`alloctune ... | cat`)
    _worker_traces = [pack(trace) for trace in traces]


def _call_in_worker(fn: Callable, trace: int, conf: AllocConf, args: _Args):
    return fn(_worker_traces[trace], conf, args)


_Task = tuple[int, AllocConf, _Args]   # (index of the trace among `_map`'s traces, the setting, its conditions)


def _map(fn: Callable, tasks: list[_Task], traces: list[Trace], jobs: int | None, progress: Progress | None) -> list:
    jobs = min(jobs or _usable_cores(), len(tasks))
    report = progress or (lambda done, total: None)
    if jobs <= 1:
        packed, results = [pack(trace) for trace in traces], []
        for trace, conf, args in tasks:
            results.append(fn(packed[trace], conf, args))
            report(len(results), len(tasks))
        return results
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(traces,))
    try:
        futures = [pool.submit(_call_in_worker, fn, *task) for task in tasks]
        for done, _ in enumerate(as_completed(futures), 1):
            report(done, len(tasks))
        return [f.result() for f in futures]
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM) or failed: stop the workers now rather than wait for their replays.
        for process in list(pool._processes.values()):
            process.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
