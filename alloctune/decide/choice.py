"""Pure selection: group trial records per setting, choose the best setting per (environment, backend, budget),
and explain the choice in plain words with numbers.

Rules (issue 2 §6, issue 8): the winner has the lowest peak memory among settings that fit and are not
significantly slower than the default by more than `max_slowdown`. Memory is peak reserved while every setting
uses the native allocator; once `backend:cudaMallocAsync` is among them it is the peak device memory in use as the
driver reports it, for all (the async backend's "reserved" is the driver pool's, not comparable block for block).
Peaks within `tie` of each other tie, and a tie goes, in this order, to a native-allocator setting over a backend
switch, to a setting whose peak repeated exactly over one whose peak moved between repeats of the seeded
workload, to fewer keys (the default has none), then to the lower peak: so the default stays unless something
beats it by more than `tie`. A setting that raises peak memory over the default's is never recommended. Replayed
traces ('sim') have no throughput: they are judged on memory, and a setting that needs more release-and-retry
rounds than the default (each one synchronises the device) is refused.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, TypeGuard

from ..errors import ResultsError
from ..results.folder import ChoiceRecord, RunnerUp
from ..results.records import TrialRecord, TrialState
from ..settings.conf import AllocConf
from ..units import format_bytes
from .stats import Comparison, Summary, compare, compare_paired, relative_spread, summarize

FITS = "fits"
SIM = "sim"
RESERVED = "peak reserved"
DEVICE = "peak device memory"   # cudaMemGetInfo's used memory, sampled after every step (CUDA context included)
# Repeats of one setting that ended differently are explained by the worst: an OOM means "does not fit",
# a mismatch means the numbers are not about the setting asked for.
_FAILURE_ORDER = (TrialState.OOM, TrialState.MISMATCH, TrialState.TIMEOUT, TrialState.CRASHED)


def group_key(record: TrialRecord) -> tuple:
    """One decision is made per (environment, backend, budget)."""
    return (record.env_id, record.backend, record.budget_bytes)


def setting_key(record: TrialRecord) -> tuple:
    """The repeats of one setting within a group."""
    return group_key(record) + (record.conf,)


def _order(key: tuple) -> tuple:
    env_id, backend, budget, conf = key
    return (env_id, backend, -1 if budget is None else budget, conf != "", conf)


@dataclass(frozen=True)
class SettingResult:
    """The repeats of one setting in one group, reduced: medians of memory over OK repeats, throughput summary."""

    conf: str
    env_id: str
    backend: str
    budget_bytes: int | None
    trials: tuple[TrialRecord, ...]
    state: str                       # 'fits' (all repeats OK) | 'oom' | 'crashed' | 'timeout' | 'mismatch'
    peak_reserved_bytes: int | None
    peak_allocated_bytes: int | None
    peak_requested_bytes: int | None
    reserved_ratio: float | None
    fragmentation: float | None
    num_alloc_retries: int | None    # max over OK repeats: one retry is already a device-wide sync
    device_peak_used_bytes: int | None
    throughput: Summary | None
    vs_default: Comparison | None    # None for the default itself and where either side has no throughput
    pairs: tuple[tuple[float, float], ...]   # (default, this) throughput per round, see bracket_pairs
    memory_spread: float             # > 0: peak reserved disagreed across repeats of a seeded workload
    unit: str | None = None
    error: str | None = None         # the first failed repeat's error, last line
    memory_measure: str = RESERVED   # what its group compares: RESERVED, or DEVICE when backends differ
    memory: int | None = None        # this setting's figure under `memory_measure`

    @property
    def group(self) -> tuple:
        return (self.env_id, self.backend, self.budget_bytes)

    @property
    def label(self) -> str:
        return self.conf or "default"

    @property
    def is_default(self) -> bool:
        return self.conf == ""

    @property
    def fits(self) -> bool:
        return self.state == FITS

    @property
    def simulated(self) -> bool:
        return self.backend == SIM

    @property
    def complexity(self) -> int:
        return AllocConf.parse(self.conf).complexity

    @property
    def switches_backend(self) -> bool:
        return AllocConf.parse(self.conf).is_async

    @property
    def unstable(self) -> bool:
        """Its peak moved between repeats of a seeded workload (the native allocator's repeats to the byte)."""
        return self.memory_spread > 0

    @property
    def peak(self) -> int:
        """`memory` as the rules compare it: a setting that does not fit has none and is never compared (0)."""
        return self.memory or 0

    @property
    def tie_rank(self) -> tuple:
        """Among settings whose memory ties, the smallest wins (see the module's rules)."""
        return (self.switches_backend, self.unstable, self.complexity, self.peak, self.conf)

    @property
    def throughputs(self) -> list[float]:
        return _throughputs(self.trials)

    @property
    def failed_repeats(self) -> int:
        return sum(map(_failed, self.trials))


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


def _state(trials: tuple[TrialRecord, ...]) -> str:
    # An OK record without a measurement is a broken child report, not a fit.
    states = {TrialState.CRASHED if r.state is TrialState.OK and _failed(r) else r.state for r in trials}
    return next((s.value for s in _FAILURE_ORDER if s in states), FITS)


def _summarize_one(key: tuple, trials: tuple[TrialRecord, ...], baseline: list[TrialRecord],
                   max_slowdown: float, position: dict[int, int]) -> SettingResult:
    env_id, backend, budget, conf = key
    ok = [r.measurement for r in trials if r.state is TrialState.OK and r.measurement is not None]  # not _failed(r)
    reserved = _median_int([m.peak_reserved_bytes for m in ok])
    allocated = _median_int([m.peak_allocated_bytes for m in ok])
    tput = _throughputs(trials)
    pairs = bracket_pairs(baseline, trials, position) if conf else []
    errors = [e for e in map(_error, trials) if e]
    return SettingResult(
        conf=conf, env_id=env_id, backend=backend, budget_bytes=budget, trials=trials, state=_state(trials),
        peak_reserved_bytes=reserved, peak_allocated_bytes=allocated,
        peak_requested_bytes=_median_int([m.peak_requested_bytes for m in ok]),
        reserved_ratio=reserved / allocated if reserved is not None and allocated else None,
        fragmentation=1 - allocated / reserved if allocated is not None and reserved else None,
        num_alloc_retries=max((m.num_alloc_retries for m in ok), default=None),
        device_peak_used_bytes=_median_int([m.device_peak_used_bytes for m in ok]),
        throughput=summarize(tput) if tput else None,
        vs_default=versus(pairs, _throughputs(baseline), tput, max_slowdown) if conf else None, pairs=tuple(pairs),
        memory_spread=relative_spread([m.peak_reserved_bytes for m in ok]),
        unit=next((m.unit for m in ok if m.unit), None),
        error=errors[0] if errors else None,
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


def summarize_settings(records: Iterable[TrialRecord], max_slowdown: float = 0.02) -> list[SettingResult]:
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
    position = {id(r): i for i, r in enumerate(r for r in records if r.backend != "sim")}
    settings = [_summarize_one(key, tuple(sorted(by_setting[key], key=lambda r: r.repeat)),
                               by_setting.get(key[:3] + ("",), []), max_slowdown, position)
                for key in sorted(by_setting, key=_order)]
    groups: dict[tuple, list[SettingResult]] = {}
    for one in settings:
        groups.setdefault(one.group, []).append(one)
    measures = {group: memory_measure(members) for group, members in groups.items()}
    return [replace(one, memory_measure=measures[one.group],
                    memory=one.device_peak_used_bytes if measures[one.group] == DEVICE else one.peak_reserved_bytes)
            for one in settings]


def memory_measure(members: list[SettingResult]) -> str:
    """DEVICE when the group's fitting settings use different backends and all have a driver-level peak,
    else RESERVED."""
    fitting = [s for s in members if s.fits]
    if len({s.switches_backend for s in fitting}) > 1 and all(s.device_peak_used_bytes for s in fitting):
        return DEVICE
    return RESERVED


def ranked(settings: Iterable[SettingResult]) -> list[SettingResult]:
    """Fitting settings by peak memory (the group's measure; simpler first on equal peaks), then the failures."""
    failures = [state.value for state in _FAILURE_ORDER]
    return sorted(settings, key=lambda s: (not s.fits, s.peak if s.fits else 0,
                                           failures.index(s.state) if not s.fits else 0, s.complexity, s.conf))


def pareto_front(settings: Iterable[SettingResult]) -> list[SettingResult]:
    """Fitting settings with a throughput that no other beats on both memory (lower) and throughput (higher),
    by increasing peak reserved."""
    points = [(s.peak_reserved_bytes, s.throughput.median, s) for s in settings
              if s.fits and s.throughput is not None and s.peak_reserved_bytes is not None]
    front, best_tput = [], float("-inf")
    for _, tput, s in sorted(points, key=lambda p: (p[0], -p[1])):
        if tput > best_tput:
            front.append(s)
            best_tput = tput
    return front


def format_rate(value: float | None, unit: str | None = None) -> str:
    """'12,345 tokens/s', '3.21 samples/s'; '-' for None."""
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit or 'units'}/s"


def _retries(count: int | None) -> str:
    return f"{count} alloc retr{'y' if count == 1 else 'ies'}" if count else "no alloc retries"


def _pct(a: float, b: float) -> str:
    """a against b as a signed percentage: '-33.3%'."""
    return f"{(a / b - 1) * 100:+.1f}%" if b else "n/a"


def within(a: int, b: int, tie: float) -> bool:
    """a and b tie: they differ by at most `tie` of the larger."""
    return abs(a - b) <= tie * max(a, b)


@dataclass(frozen=True)
class Choice:
    """The decision for one (environment, backend, budget). `best` is None when nothing fits."""

    env_id: str
    backend: str
    budget_bytes: int | None
    best: SettingResult | None
    baseline: SettingResult | None   # the default's result; None only if the default was not run here
    reasons: tuple[str, ...]
    runners_up: tuple[tuple[SettingResult, str], ...]
    decision: str = ""               # the one reason that decided (reasons adds caveats around it)
    max_slowdown: float = 0.02
    tie: float = 0.01
    env: dict = field(default_factory=dict)   # the group's provenance (torch, gpu, ...) from its records
    workload: str = ""
    workload_hash: str = ""
    compared: tuple[SettingResult, ...] = ()   # the group's fitting settings with a throughput comparison
    precision: str = ""   # whether the interval reached its width goal, and if not why (set by the sweeper)
    # Set by `sweeper.analyze` from sweep.json: fewer recorded than planned = an interrupted sweep.
    trials_recorded: int = 0
    trials_planned: int | None = None

    @property
    def simulated(self) -> bool:
        return self.backend == SIM

    @property
    def detectable(self) -> float | None:
        """The smallest slowdown this sweep could have detected: the half-width of the winner's throughput ratio
        interval against the default; when the default won, the widest among the settings compared with it."""
        if self.best is not None and not self.best.is_default:
            return self.best.vs_default.half_width if self.best.vs_default else None
        widths = [s.vs_default.half_width for s in self.compared
                  if s.vs_default is not None and s.vs_default.half_width is not None]
        return max(widths) if widths else None

    @property
    def complete(self) -> bool:
        return self.trials_planned is None or self.trials_recorded >= self.trials_planned

    @property
    def verdict(self) -> str:
        if self.best is None:
            return "nothing fits"
        if self.simulated or self.best.throughput is None:
            return "not measured"
        if self.best.is_default:
            return "no significant difference"
        return self.best.vs_default.verdict if self.best.vs_default else "not measured"

    def record(self) -> ChoiceRecord:
        """The decision as choice.json keeps it."""
        best, base = self.best, self.baseline
        cmp = best.vs_default if best is not None else None
        if best is not None and best.is_default and best.throughput is not None:
            ratio: float | None = 1.0
        else:
            ratio = cmp.ratio if cmp else None
        return ChoiceRecord(
            workload=self.workload, workload_hash=self.workload_hash,
            env_id=self.env_id, backend=self.backend, budget_bytes=self.budget_bytes,
            fits=best is not None,
            conf=best.conf if best else None,
            label=best.label if best else "nothing fits",
            baseline="",
            is_default=bool(best and best.is_default),
            simulated=self.simulated,
            # A replay follows the torch it was simulated as, not the one the trace was recorded with.
            torch_version=self.env.get("simulated_as") or self.env.get("torch"),
            env=self.env,
            decision=self.decision,
            reasons=self.reasons,
            runners_up=tuple(RunnerUp(s.conf, why) for s, why in self.runners_up),
            peak_reserved_bytes=best.peak_reserved_bytes if best else None,
            memory_measure=best.memory_measure if best else None,
            memory_bytes=best.memory if best else None,
            device_peak_used_bytes=best.device_peak_used_bytes if best else None,
            baseline_memory_bytes=base.memory if base else None,
            peak_allocated_bytes=best.peak_allocated_bytes if best else None,
            reserved_ratio=best.reserved_ratio if best else None,
            num_alloc_retries=best.num_alloc_retries if best else None,
            baseline_state=base.state if base else None,
            baseline_peak_reserved_bytes=base.peak_reserved_bytes if base else None,
            baseline_reserved_ratio=base.reserved_ratio if base else None,
            throughput_median=best.throughput.median if best and best.throughput else None,
            baseline_throughput_median=base.throughput.median if base and base.throughput else None,
            throughput_unit=best.unit if best else None,
            throughput_ratio=ratio,
            throughput_p_value=cmp.p_value if cmp else None,
            throughput_ratio_ci=(cmp.ci_low, cmp.ci_high) if cmp and cmp.ci_low is not None and cmp.ci_high is not None
            else None,
            paired_rounds=cmp.pairs if cmp else None,
            detectable_slowdown=self.detectable,
            precision=self.precision,
            verdict=self.verdict,
            max_slowdown=self.max_slowdown,
            tie=self.tie,
            repeats=max((len(s.trials) for s in (best, base) if s), default=0),
            complete=self.complete,
            trials_recorded=self.trials_recorded,
            trials_planned=self.trials_planned,
        )

    def to_json(self) -> dict[str, Any]:
        return self.record().to_json()


def _comparison(s: SettingResult, base: SettingResult | None, max_slowdown: float) -> Comparison | None:
    """`s.vs_default`, recomputed when it was summarised with another tolerance."""
    if s.vs_default is None or s.vs_default.tolerance == max_slowdown or base is None:
        return s.vs_default
    return versus(list(s.pairs), base.throughputs, s.throughputs, max_slowdown)


def _failure(s: SettingResult) -> str:
    n, failed = len(s.trials), s.failed_repeats
    what = {"oom": "does not fit: out of memory", "crashed": "crashed", "timeout": "timed out",
            "mismatch": "the allocator settings that took effect differ from those asked for"}[s.state]
    budget = f" under the {format_bytes(s.budget_bytes)} budget" if s.state == "oom" and s.budget_bytes else ""
    detail = f" ({s.error})" if s.error and s.state != "oom" else ""
    return f"{what}{budget} in {failed} of {n} repeat{'s' if n != 1 else ''}{detail}"


def _slowdown(c: Comparison, max_slowdown: float) -> str:
    return (f"{(1 - c.ratio) * 100:.1f}% slower than the default, significantly beyond the {max_slowdown:.0%} "
            f"allowance (one-sided {_test(c)} p = {c.p_slower:.2g})")


def _too_slow(c: Comparison | None, max_slowdown: float) -> TypeGuard[Comparison]:
    # With one repeat a side there is no test, and one process's throughput moves ±6% (outliers 20% low) on its
    # own: a single pair of runs cannot show a slowdown, so it refuses nothing; the reasons say it is untested.
    return c is not None and c.slower_beyond_tolerance


def _rejection(s: SettingResult, base: SettingResult | None, max_slowdown: float) -> str | None:
    """Why `s` may not be recommended, or None when it may."""
    if not s.fits:
        return _failure(s)
    if s.is_default or base is None or not base.fits:
        return None
    if s.peak > base.peak:
        return (f"raises {s.memory_measure} to {format_bytes(s.peak)} "
                f"({_pct(s.peak, base.peak)} against the default's {format_bytes(base.peak)})")
    if s.simulated and (s.num_alloc_retries or 0) > (base.num_alloc_retries or 0):
        return (f"needs {_retries(s.num_alloc_retries)} where the default needs {_retries(base.num_alloc_retries)}: "
                f"each retry frees the cache and synchronises the device, a slowdown the replay cannot time")
    c = _comparison(s, base, max_slowdown)
    if _too_slow(c, max_slowdown):
        saved = base.peak - s.peak
        return f"saves {format_bytes(saved)} but is {_slowdown(c, max_slowdown)}"
    return None


def _test(c: Comparison) -> str:
    return f"paired t-test over {c.pairs} rounds," if c.pairs else "Welch"


def _interval(c: Comparison) -> str:
    """'; 95% interval 0.981-1.004, ±1.1%': the half-width is the smallest difference the sweep could detect."""
    if c.ci_low is None or c.half_width is None:
        return ""
    return f"; 95% interval {c.ci_low:.3f}-{c.ci_high:.3f}x, ±{c.half_width:.1%}"


def _throughput_reason(best: SettingResult, base: SettingResult, max_slowdown: float) -> str:
    c = _comparison(best, base, max_slowdown)
    if c is None or best.throughput is None or base.throughput is None:
        return "throughput was not compared (no throughput measured on one side)"
    medians = (f"median {format_rate(best.throughput.median, best.unit)} against "
               f"{format_rate(base.throughput.median, base.unit)}")
    if c.p_value is None:
        return (f"throughput {c.ratio:.3f}x the default's ({medians}): NOT TESTED, one repeat cannot tell a "
                f"difference from noise (fresh processes vary by several percent); confirm with --repeats 3 or more")
    if not c.significant:
        return (f"throughput {c.ratio:.3f}x the default's ({medians}): no significant difference "
                f"({_test(c)} p = {c.p_value:.2g}{_interval(c)})")
    if abs(c.ratio - 1) < NEGLIGIBLE:
        return (f"throughput {c.ratio:.3f}x the default's ({medians}): statistically detectable ({_test(c)} p = "
                f"{c.p_value:.2g}{_interval(c)}) but under {NEGLIGIBLE:.0%}: no practical difference")
    allowance = f", inside the {max_slowdown:.0%} allowance" if c.ratio < 1 else ""
    return (f"throughput {c.ratio:.3f}x the default's ({medians}): significantly {c.verdict} "
            f"({_test(c)} p = {c.p_value:.2g}{_interval(c)}){allowance}")


SIMULATED_NOTE = ("simulated: decided by replaying a recorded allocation trace, on memory alone "
                  "(no throughput measured)")
SMALL_GAIN = 0.10  # below this saving the reasons say that the default is about as good
NEGLIGIBLE = 0.01  # a throughput difference below this is called negligible even when a test can detect it


def _memory_reason(best: SettingResult, base: SettingResult) -> str:
    saved = base.peak - best.peak
    text = (f"{best.memory_measure} {format_bytes(best.peak)} against the default's "
            f"{format_bytes(base.peak)} ({_pct(best.peak, base.peak)}, saves {format_bytes(saved)})")
    if best.reserved_ratio is not None and base.reserved_ratio is not None:
        text += f"; reserved/allocated {best.reserved_ratio:.2f} against {base.reserved_ratio:.2f}"
    if saved < SMALL_GAIN * base.peak:
        text += (f". A small gain: the default is within {SMALL_GAIN:.0%} of it, so keeping the default is "
                 f"sound too")
    return text


def _reasons(best: SettingResult | None, base: SettingResult | None, members: list[SettingResult],
             eligible: list[SettingResult], max_slowdown: float, tie: float) -> list[str]:
    reasons: list[str] = []
    if best is None:
        counts = Counter(s.state for s in members)
        budget = f" under the {format_bytes(members[0].budget_bytes)} budget" if members[0].budget_bytes else ""
        return [f"nothing fits{budget}: all {len(members)} settings failed ("
                + ", ".join(f"{state}: {n}" for state, n in sorted(counts.items())) + ")"]
    if base is None:
        reasons.append(f"the default was not run in this group: chosen on {best.memory_measure} alone")
    elif not base.fits:
        reasons.append(f"the default {_failure(base)}; {best.label} is the lowest {best.memory_measure} "
                       f"({format_bytes(best.peak)}) of the {len(eligible)} settings that fit")
    elif best.is_default:
        others = [s for s in eligible if not s.is_default]
        text = (f"no setting lowers {base.memory_measure} by more than {tie:.0%} below the default's "
                f"{format_bytes(base.peak)} and meets the rules: keep the default")
        if others:
            low = min(others, key=lambda s: s.peak)
            text += f" (closest: {low.label} at {format_bytes(low.peak)}, {_pct(low.peak, base.peak)})"
        reasons.append(text)
        lower_rejected = [s for s in members if s.fits and s.peak < base.peak
                          and all(s is not e for e in eligible)]
        if lower_rejected:
            reasons.append(f"{len(lower_rejected)} setting(s) with less memory were refused: "
                           + "; ".join(f"{s.label} {_rejection(s, base, max_slowdown)}" for s in lower_rejected))
    else:
        reasons.append(_memory_reason(best, base))
        if best.simulated:
            same = (best.num_alloc_retries or 0) == (base.num_alloc_retries or 0)
            reasons.append(f"needs {_retries(best.num_alloc_retries)}, " + (
                "like the default" if same else f"fewer than the default's {base.num_alloc_retries}"))
        else:
            reasons.append(_throughput_reason(best, base, max_slowdown))
    if best.memory_measure == DEVICE:
        reasons.append(f"memory compared as {DEVICE} (what the driver reports in use, CUDA context included) "
                       f"for every setting: backends differ, and cudaMallocAsync's 'reserved' is the driver "
                       f"pool's, not comparable with the native allocator's")
    tied = [s for s in eligible if s is not best and within(s.peak, best.peak, tie)]
    if tied and not best.is_default:
        reasons.append("; ".join(f"{s.label} came within {tie:.0%} of its {best.memory_measure} "
                                 f"({format_bytes(s.peak)}, {_pct(s.peak, best.peak)}); {best.label} "
                                 f"wins the tie {_tie_reason(best, s)}" for s in tied))
    if best.unstable:
        reasons.append(f"caution: its peak reserved disagreed across repeats by {best.memory_spread:.1%} "
                       f"(the table shows the median)")
    return reasons


def _tie_loss(winner: SettingResult, loser: SettingResult) -> str:
    """The first rule of `tie_rank` that tells the two apart, said of the loser."""
    if loser.switches_backend and not winner.switches_backend:
        return "it switches the allocator backend, the winner keeps the native allocator"
    if loser.unstable and not winner.unstable:
        return f"its peak moved between repeats (+{loser.memory_spread:.1%}), the winner's repeated exactly"
    if loser.complexity != winner.complexity:
        return f"it sets {loser.complexity} key(s) against {winner.complexity}"
    return "the winner's peak is lower" if loser.peak != winner.peak else "the same peak; decided by name"


def _tie_reason(winner: SettingResult, loser: SettingResult) -> str:
    """Why `winner` beat `loser` on a tie, said of the winner."""
    if loser.switches_backend and not winner.switches_backend:
        return "as a native-allocator setting over a backend switch"
    if loser.unstable and not winner.unstable:
        return "as its peak repeated exactly while the other's moved between repeats"
    if loser.complexity != winner.complexity:
        return f"as the simpler setting ({winner.complexity} key(s) against {loser.complexity})"
    return "with the lower peak" if loser.peak != winner.peak else "(equal in every rule; by name)"


def _why_not(s: SettingResult, best: SettingResult | None, base: SettingResult | None,
             max_slowdown: float, tie: float) -> str:
    rejected = _rejection(s, base, max_slowdown)
    if rejected or best is None:
        return rejected or "not chosen"
    extra, diff = s.peak - best.peak, ""
    c = _comparison(s, base, max_slowdown)
    if c is not None:
        diff = f"; throughput {c.ratio:.3f}x the default's ({c.verdict})"
    if within(s.peak, best.peak, tie):
        return (f"ties with the winner on {s.memory_measure} ({format_bytes(s.peak)}, "
                f"{_pct(s.peak, best.peak)}) but loses the tie: {_tie_loss(best, s)}{diff}")
    return (f"costs {format_bytes(extra)} more {s.memory_measure} than the winner "
            f"({_pct(s.peak, best.peak)}){diff}")


def _choose_group(members: list[SettingResult], max_slowdown: float, tie: float) -> Choice:
    base = next((s for s in members if s.is_default), None)
    eligible = [s for s in members if _rejection(s, base, max_slowdown) is None]
    best = None
    if eligible:
        low = min(s.peak for s in eligible)
        best = min((s for s in eligible if within(s.peak, low, tie)), key=lambda s: s.tie_rank)
    first = members[0].trials[0]
    reasons = _reasons(best, base, members, eligible, max_slowdown, tie)
    caveats = [SIMULATED_NOTE] if best is not None and best.simulated else []
    return Choice(
        env_id=first.env_id, backend=first.backend, budget_bytes=first.budget_bytes, best=best, baseline=base,
        reasons=tuple(caveats + reasons), decision=reasons[0],
        runners_up=tuple((s, _why_not(s, best, base, max_slowdown, tie)) for s in ranked(members) if s is not best),
        max_slowdown=max_slowdown, tie=tie, env=dict((best or base or members[0]).trials[0].env),
        workload=first.workload, workload_hash=first.workload_hash,
        compared=tuple(s for s in members if s.fits and s.vs_default is not None))


def choose(settings: Iterable[SettingResult], max_slowdown: float = 0.02, tie: float = 0.01) -> list[Choice]:
    """One `Choice` per (env_id, backend, budget_bytes), in the order the groups first appear."""
    groups: dict[tuple, list[SettingResult]] = {}
    for s in settings:
        groups.setdefault(s.group, []).append(s)
    return [_choose_group(members, max_slowdown, tie) for members in groups.values()]
