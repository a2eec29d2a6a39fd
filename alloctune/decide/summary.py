"""Per-setting results: the trial records of one setting in one decision group, reduced to what the choice compares
(medians of memory, a throughput summary, the comparison with the default), and the Pareto front of a group. Each
figure is computed here (`_summarize_one`) into its field of `results/figures.SettingFigures`, which a
`SettingResult` extends with the trials behind it and choice.json keeps as it is.

Two settings of one backend compare by peak reserved, which is exact (the native allocator's peaks repeat to the
byte, and replay predicts them). Device memory, what the driver reports in use (CUDA context included), compares
settings of different backends only, where both have a usable figure: cudaMallocAsync's "reserved" is the driver
pool's, not comparable block for block (`SettingResult.compared_with`). A group whose fitting settings use both
backends shows device memory in its tables (`memory_measure`). Which device figures are usable is `device.py`'s.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable, TypeVar

from ..errors import ResultsError
from ..results.figures import Comparison, MemoryMeasure, SettingFigures, SettingState
from ..results.records import Backend, Measurement, TrialRecord, TrialState, decision_group
from ..settings.conf import AllocConf
from .device import DEVICE_AGREEMENT, device_memory, plausible_device, takes_whole_card
from .inprocess import in_process_pairs
from .parameters import DEFAULT_MAX_SLOWDOWN
from .stats import compare, compare_paired, finite, relative_spread, summarize


F = TypeVar("F", bound=SettingFigures)   # a setting's figures: a SettingResult, or as choice.json keeps them


def setting_key(record: TrialRecord) -> tuple:
    """The repeats of one setting within a group (`records.decision_group`)."""
    return decision_group(record) + (record.conf,)


def _order(key: tuple) -> tuple:
    env_id, backend, budget, conf = key
    return (env_id, backend, -1 if budget is None else budget, conf != "", conf)


@dataclass(frozen=True, kw_only=True)
class SettingResult(SettingFigures):
    """The repeats of one setting in one group, reduced: its figures (`SettingFigures`, which choice.json keeps),
    computed here from the trials it holds, and what the rules need beyond them."""

    env_id: str
    backend: Backend
    budget_bytes: int | None
    trials: tuple[TrialRecord, ...]
    pairs: tuple[tuple[float, float], ...]   # (default, this) throughput per round, see bracket_pairs
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN   # the allowance `vs_default` was judged against, which choose applies

    @property
    def group(self) -> tuple:
        return decision_group(self)

    @property
    def simulated(self) -> bool:
        return self.backend == Backend.SIM

    @property
    def setting(self) -> AllocConf:
        """As its trials read it (`TrialRecord.setting`): they all ran this one."""
        return self.trials[0].setting

    @property
    def complexity(self) -> int:
        return self.setting.complexity

    @property
    def switches_backend(self) -> bool:
        return self.setting.is_async

    def compared_with(self, other: "SettingResult") -> tuple[MemoryMeasure, int, int]:
        """This setting's memory and `other`'s as the rules compare them (see the module): peak reserved within a
        backend, device memory across backends where both have a usable figure (else peak reserved). A setting that
        does not fit has none (0) and is never compared."""
        if (self.switches_backend != other.switches_backend and self.device_peak_used_bytes
                and other.device_peak_used_bytes):
            return (MemoryMeasure.DEVICE, _fitting(self, self.device_peak_used_bytes),
                    _fitting(other, other.device_peak_used_bytes))
        return (MemoryMeasure.RESERVED, _fitting(self, self.peak_reserved_bytes),
                _fitting(other, other.peak_reserved_bytes))



def _fitting(s: SettingResult, value: int | None) -> int:
    return (value or 0) if s.fits else 0


def _throughputs(trials: Iterable[TrialRecord]) -> list[float]:
    return [tput for _, tput in _timed(trials)]


def _timed(trials: Iterable[TrialRecord]) -> list[tuple[TrialRecord, float]]:
    """The OK repeats that measured a (positive) throughput, with it."""
    return [(r, r.measurement.throughput) for r in trials if r.state is TrialState.OK and r.measurement is not None
            and r.measurement.throughput is not None and r.measurement.throughput > 0]


def bracket_pairs(baseline: Iterable[TrialRecord], trials: Iterable[TrialRecord],
                  position: dict[int, int]) -> list[tuple[float, float]]:
    """(baseline, candidate) throughput per round. Rounds run the default first (repeat r), then the others, and
    the next round's default (repeat r + 1) right after them: a candidate run between the two gets as baseline
    the default's throughput interpolated (log-linearly, by its place in the run order, `position[id(record)]`)
    between the two, so that a machine drifting steadily during the round favours no one. Without a following
    default run it is paired with its round's default alone."""
    base = {r.repeat: (r, tput) for r, tput in _timed(baseline)}
    pairs = []
    for c, tput in _timed(trials):
        if c.repeat not in base:
            continue
        before, value = base[c.repeat]
        p0, pc = position.get(id(before)), position.get(id(c))
        if c.repeat + 1 in base and p0 is not None and pc is not None:
            after, next_value = base[c.repeat + 1]
            p1 = position.get(id(after))
            if p1 is not None and p0 < pc < p1:
                w = (pc - p0) / (p1 - p0)
                value = math.exp((1 - w) * math.log(value) + w * math.log(next_value))
        pairs.append((value, tput))
    return pairs


def versus(pairs: list[tuple[float, float]], baseline: list[float], candidate: list[float],
           tolerance: float) -> Comparison | None:
    """The candidate against the default: paired (`bracket_pairs`) where two or more rounds have both; otherwise
    Welch's test on the two samples. None when either side has no throughput."""
    if len(pairs) >= 2:
        return compare_paired(pairs, tolerance)
    if not baseline or not candidate:
        return None
    return compare(baseline, candidate, tolerance)


def _median_int(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return int(round(statistics.median(known))) if known else None


def _failed(r: TrialRecord) -> bool:
    return r.state is not TrialState.OK or r.measurement is None


def _error(r: TrialRecord) -> str | None:
    """The last line of a failed repeat's error."""
    if not _failed(r):
        return None
    if r.state is TrialState.OK:
        return "reported OK without a measurement"
    text = (r.error or "").strip()
    return text.splitlines()[-1] if text else None


def _state(trials: tuple[TrialRecord, ...]) -> SettingState:
    # An OK record without a measurement is a broken child report, not a fit.
    states = {SettingState.CRASHED if r.state is TrialState.OK else SettingState(r.state.value)
              for r in trials if _failed(r)}
    return min(states, key=lambda s: s.rank, default=SettingState.FITS)


def _measurements(trials: Iterable[TrialRecord]) -> list[Measurement]:
    return [r.measurement for r in trials if r.state is TrialState.OK and r.measurement is not None]


def _summarize_one(key: tuple, trials: tuple[TrialRecord, ...], baseline: list[TrialRecord],
                   max_slowdown: float, position: dict[int, int]) -> SettingResult:
    env_id, backend, budget, conf = key
    ok = _measurements(trials)  # not _failed(r)
    reserved = _median_int([m.peak_reserved_bytes for m in ok])
    allocated = _median_int([m.peak_allocated_bytes for m in ok])
    tput = _throughputs(trials)
    # an in-process confirmation's pairs of blocks, where it ran one; else runs in separate processes
    pairs = (in_process_pairs(trials) or bracket_pairs(baseline, trials, position)) if conf else []
    errors = [e for e in map(_error, trials) if e]
    device, device_spread, contaminated = plausible_device(trials)
    memory_spread = relative_spread([m.peak_reserved_bytes for m in ok])
    # The native allocator's peaks repeat to the byte; the driver pool behind cudaMallocAsync's do not, so a backend
    # switch is unstable only beyond DEVICE_AGREEMENT.
    unstable = memory_spread > (DEVICE_AGREEMENT if trials[0].setting.is_async else 0)
    return SettingResult(
        conf=conf, env_id=env_id, backend=backend, budget_bytes=budget, trials=trials, state=_state(trials),
        repeats=len(trials), failed_repeats=sum(map(_failed, trials)),
        peak_reserved_bytes=reserved, peak_allocated_bytes=allocated,
        peak_requested_bytes=_median_int([m.peak_requested_bytes for m in ok]),
        reserved_ratio=reserved / allocated if reserved is not None and allocated else None,
        fragmentation=1 - allocated / reserved if allocated is not None and reserved else None,
        num_alloc_retries=max((m.num_alloc_retries for m in ok), default=None),
        device_peak_used_bytes=device, device_spread=finite(device_spread), contaminated=contaminated,
        device_disagrees=device_spread > DEVICE_AGREEMENT,
        throughput=summarize(tput) if tput else None,
        vs_default=versus(pairs, _throughputs(baseline), tput, max_slowdown) if conf else None, pairs=tuple(pairs),
        memory_spread=finite(memory_spread), unstable=unstable,
        unit=next((m.unit for m in ok if m.unit), None),
        error=errors[0] if errors else None,
        device_bytes=device_memory(trials), max_slowdown=max_slowdown,
    )


def counted(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The trials statistics rest on: all but extra ones (TrialRecord.extra) and a recording trial beside an
    unrecorded trial of the same key (a folder from before it counted: there, as that folder's reports always
    said, the unrecorded one is repeat 0).

    A counted recording trial is the default's repeat 0 like any other. Should its throughput stray, the outlier
    rule treats it as any default run: left out of the default's interval and of Welch's test from 3 default runs
    on, and its round left out of a paired comparison from PAIRED_OUTLIER_MIN (6) rounds on (stats.py). With fewer
    runs it stays in, as any default run would."""
    records = list(records)
    unrecorded = {r.key for r in records if not r.recording}
    return [r for r in records if not r.extra and not (r.recording and r.key in unrecorded)]


def summarize_settings(records: Iterable[TrialRecord],
                       max_slowdown: float = DEFAULT_MAX_SLOWDOWN) -> list[SettingResult]:
    """One `SettingResult` per (env_id, backend, budget_bytes, conf), ordered by group, default first.

    Records of different workload definitions do not compare: mixing them is refused. A trial that recorded the
    allocation trace counts as the default's repeat 0 (`counted`)."""
    records = counted(records)
    hashes = sorted({r.workload_hash for r in records})
    if len(hashes) > 1:
        raise ResultsError(f"trial records of {len(hashes)} different workload definitions ({', '.join(hashes)}) "
                           f"cannot be compared in one selection; select one workload hash")
    by_setting: dict[tuple, list[TrialRecord]] = {}
    for record in records:
        by_setting.setdefault(setting_key(record), []).append(record)
    # The order measured trials ran in (the trials file's). Replays use no GPU time and do not count: a hybrid
    # sweep's replays come after its recording trial, the default's repeat 0, and before the settings it brackets.
    position = {id(r): i for i, r in enumerate(r for r in records if r.backend != Backend.SIM)}
    settings = [_summarize_one(key, tuple(sorted(by_setting[key], key=lambda r: r.repeat)),
                               by_setting.get(key[:3] + ("",), []), max_slowdown, position)
                for key in sorted(by_setting, key=_order)]
    groups: dict[tuple, list[SettingResult]] = {}
    for one in settings:
        groups.setdefault(one.group, []).append(one)
    measures = {group: memory_measure(members) for group, members in groups.items()}
    return [_measured_as(one, measures[one.group]) for one in settings]


def _measured_as(one: SettingResult, measure: MemoryMeasure) -> SettingResult:
    """`one` with its memory under its group's measure, and whether that took (nearly) the whole card."""
    memory = one.device_peak_used_bytes if measure is MemoryMeasure.DEVICE else one.peak_reserved_bytes
    return replace(one, memory_measure=measure, memory=memory,
                   whole_card=one.fits and takes_whole_card(memory, one.device_bytes))


def memory_measure(members: list[SettingResult]) -> MemoryMeasure:
    """DEVICE when the group's fitting settings use different backends and all have a driver-level peak,
    else RESERVED."""
    fitting = [s for s in members if s.fits]
    if len({s.switches_backend for s in fitting}) > 1 and all(s.device_peak_used_bytes for s in fitting):
        return MemoryMeasure.DEVICE
    return MemoryMeasure.RESERVED


def pareto_front(settings: Iterable[F]) -> list[F]:
    """Fitting settings with a throughput that no other beats on both memory (lower, as the reports show it:
    `memory_figure`) and throughput (higher), by increasing memory. Not a preference (`order.py`): a front has no tie
    margin and weighs throughput."""
    points = [(s.memory_figure, s.throughput.median, s) for s in settings
              if s.fits and s.throughput is not None and s.memory_figure is not None]
    front, best_tput = [], float("-inf")
    for _, tput, s in sorted(points, key=lambda p: (p[0], -p[1])):
        if tput > best_tput:
            front.append(s)
            best_tput = tput
    return front
