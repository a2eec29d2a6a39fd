"""Replays for questions across traces: one job recorded at several values of a parameter (every setting at each
value, without a limit for the peaks a curve is fitted to, and under each memory limit for whether it runs), and
several jobs under one grid (a fleet's peaks).

A limit is a card of some memory, or a budget on the recording GPU as a sweep applies it (the allocator may
reserve `budget_bytes`); for fit's largest value, a replay under it "runs" when it has no OOM and no alloc retry
(decide/fit.py says why). What a value needs is the least room it runs in so (`Replayed.least_room_bytes`,
`replay --min-memory`'s rule), not its peak reserved under a limit: under max_split_size_mb that can fill whatever
room the limit leaves, as cached oversize blocks are released only once the room runs out. A fleet's job fits a
setting as every replay fits (`ReplayOutcome.fits`: no OOM), with its alloc retries kept beside.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from ..settings.conf import AllocConf
from .limits import DEFAULT_DEVICE_MEMORY, DEFAULT_OVERHEAD
from .replay import min_memory_many, replay, replay_many
from .trace import Trace

UNLIMITED = 1 << 60   # a device no replay fills: the peaks a setting reaches when nothing stops it


@dataclass(frozen=True)
class Limit:
    """A card of `device_bytes`, or with `budget_bytes` a budget on such a device."""

    device_bytes: int
    budget_bytes: int | None = None

    def capacity(self, overhead_bytes: int) -> int:
        """The peak reserved a job may reach under the limit: the card less its CUDA context, or the budget."""
        room = self.device_bytes - overhead_bytes
        return room if self.budget_bytes is None else min(room, self.budget_bytes)


@dataclass(frozen=True)
class Replayed:
    """One setting at one recorded value: its peaks without a limit, whether it runs under each limit, and the least
    room it runs in without an OOM and without an alloc retry (`replay --min-memory`'s device memory less the context,
    found to its granularity, without a memory fraction; None: none up to its search's end)."""

    value: int
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    runs: tuple[bool, ...]   # per limit, in the order given
    least_room_bytes: int | None


@dataclass(frozen=True)
class SettingPoints:
    """A setting at every recorded value (in order), or why it is not simulated (then `points` is empty)."""

    setting: AllocConf
    points: tuple[Replayed, ...]
    reason: str | None = None


class HasMeta(Protocol):
    """A trace, or what a caller kept of one once it dropped its events: its metadata."""

    @property
    def meta(self) -> Mapping[str, Any]: ...


def overhead_of(traces: Sequence[HasMeta]) -> int:
    """The CUDA context one process holds outside the allocator: the most the recordings measured, else
    DEFAULT_OVERHEAD."""
    measured = [int(t.meta["overhead_bytes"]) for t in traces if t.meta.get("overhead_bytes") is not None]
    return max(measured) if measured else DEFAULT_OVERHEAD


def recording_device(traces: Sequence[HasMeta]) -> int:
    """The memory of the GPU the traces were recorded on (a budget is a share of it), else an H200's."""
    recorded = [int(t.meta["device_total_bytes"]) for t in traces if t.meta.get("device_total_bytes")]
    return max(recorded) if recorded else DEFAULT_DEVICE_MEMORY


def replay_value(trace: Trace, confs: Sequence[AllocConf], limits: Sequence[Limit], *, value: int,
                 overhead_bytes: int, jobs: int | None = None) -> list[Replayed | str]:
    """Every setting of `confs` replayed on `trace`, recorded at `value`, without a limit and under each of
    `limits`, and its least room found (`min_memory_many`): per setting, its `Replayed`, or why it is not simulated.
    One trace at a time: a pool's workers hold every trace they are given, and one value's trace is what a large
    job's replays can afford on every core."""
    conditions: list[tuple[int, int | None]] = [(UNLIMITED, None)]
    conditions += [(limit.device_bytes, limit.budget_bytes) for limit in limits]
    free, *limited = replay_many([(trace, device, budget) for device, budget in conditions], confs,
                                 overhead_bytes=overhead_bytes, jobs=jobs)
    least = min_memory_many(trace, confs, overhead_bytes=overhead_bytes, jobs=jobs, no_retry_only=True)
    out: list[Replayed | str] = []
    for i in range(len(confs)):
        result = free[i].result
        if not free[i].simulated or result is None:
            out.append(free[i].reason or "not simulated")
            continue
        room = least[i].no_retry_bytes
        out.append(Replayed(value, result.peak_reserved_bytes, result.peak_allocated_bytes,
                            tuple(_runs(outcomes[i].result) for outcomes in limited),
                            None if room is None else room - overhead_bytes))
    return out


def points_of(by_value: Mapping[int, Sequence[Replayed | str]], confs: Sequence[AllocConf]) -> list[SettingPoints]:
    """Each setting at every value replayed (`replay_value`'s lists, by value), or why it is not simulated."""
    values = sorted(by_value)
    out = []
    for i, conf in enumerate(confs):
        replays = [by_value[v][i] for v in values]
        reason = next((r for r in replays if isinstance(r, str)), None)
        out.append(SettingPoints(conf, (), reason) if reason is not None else
                   SettingPoints(conf, tuple(r for r in replays if isinstance(r, Replayed))))
    return out


def _runs(result) -> bool:
    return result is not None and result.num_ooms == 0 and result.num_alloc_retries == 0


@dataclass(frozen=True)
class JobPeaks:
    """What a fleet keeps of one job's trace once it is replayed: the peak reserved under each simulated setting
    (None where it does not fit: an OOM) and its alloc retries where it fits, the settings not simulated with why,
    and the torch that recorded it."""

    peaks: dict[AllocConf, int | None]
    retries: dict[AllocConf, int]
    not_simulated: dict[AllocConf, str]
    torch_version: str | None


def job_peaks(trace: Trace, confs: Sequence[AllocConf], *, device_memory: int | None = None,
              budget_bytes: int | None = None, jobs: int | None = None) -> JobPeaks:
    """One job's trace replayed under `confs` on its recording GPU (or `device_memory`), within `budget_bytes`
    where given: its figures, which are all a fleet holds of it (a trace can take gigabytes; the next job's is
    loaded once this one is dropped)."""
    peaks: dict[AllocConf, int | None] = {}
    retries: dict[AllocConf, int] = {}
    not_simulated: dict[AllocConf, str] = {}
    for o in replay(trace, confs, device_memory or recording_device([trace]), budget_bytes=budget_bytes, jobs=jobs):
        if o.result is None:
            not_simulated[o.setting] = o.reason or ""
        else:
            peaks[o.setting] = o.result.peak_reserved_bytes if o.fits else None
            retries[o.setting] = o.result.num_alloc_retries if o.fits else 0
    return JobPeaks(peaks, retries, not_simulated, trace.meta.get("torch_version"))


def fleet_peaks(jobs: Mapping[str, JobPeaks], confs: Sequence[AllocConf]) -> tuple[
        dict[str, dict[AllocConf, int | None]], dict[str, dict[AllocConf, int]], dict[AllocConf, str]]:
    """Each job's peak reserved (None: it does not fit) and alloc retries under each of `confs` simulated for every
    job; and those of `confs` not simulated for some job, with why (left out)."""
    not_simulated = {s: why for job in jobs.values() for s, why in job.not_simulated.items() if s in confs}
    kept = [s for s in confs if s not in not_simulated]
    return ({name: {s: job.peaks[s] for s in kept} for name, job in jobs.items()},
            {name: {s: job.retries[s] for s in kept} for name, job in jobs.items()}, not_simulated)
