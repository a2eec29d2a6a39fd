"""Pure selection: group trial records per setting, choose the best setting per (environment, backend, budget),
and explain the choice in plain words with numbers.

Rules (issue 2 §6): the winner has the lowest peak reserved among settings that fit and are not significantly
slower than the default by more than `max_slowdown`. Peaks within `tie` of each other tie, and the simpler
setting (fewer keys; the default has none) wins a tie, so the default stays unless something beats it by more
than `tie`. A setting that raises peak reserved over the default's is never recommended. Replayed traces
('sim') have no throughput: they are judged on memory, and a setting that needs more release-and-retry rounds
than the default (each one synchronises the device) is refused.
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from .conf import AllocConf
from .errors import ResultsError
from .records import TrialRecord, TrialState
from .results import ChoiceRecord, RunnerUp
from .stats import Comparison, Summary, compare, relative_spread, summarize
from .units import format_bytes

FITS = "fits"
SIM = "sim"
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
    memory_spread: float             # > 0: peak reserved disagreed across repeats of a seeded workload
    unit: str | None = None
    error: str | None = None         # the first failed repeat's error, last line

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
    def throughputs(self) -> list[float]:
        return _throughputs(self.trials)

    @property
    def failed_repeats(self) -> int:
        return sum(map(_failed, self.trials))


def _throughputs(trials: Iterable[TrialRecord]) -> list[float]:
    return [r.measurement.throughput for r in trials if not _failed(r) and r.measurement.throughput is not None]


def _median_int(values: list[int | None]) -> int | None:
    values = [v for v in values if v is not None]
    return int(round(statistics.median(values))) if values else None


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
                   max_slowdown: float) -> SettingResult:
    env_id, backend, budget, conf = key
    ok = [r.measurement for r in trials if not _failed(r)]
    reserved = _median_int([m.peak_reserved_bytes for m in ok])
    allocated = _median_int([m.peak_allocated_bytes for m in ok])
    tput = _throughputs(trials)
    base_tput = _throughputs(baseline)
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
        vs_default=compare(base_tput, tput, max_slowdown) if conf and tput and base_tput else None,
        memory_spread=relative_spread([m.peak_reserved_bytes for m in ok]),
        unit=next((m.unit for m in ok if m.unit), None),
        error=errors[0] if errors else None,
    )


def summarize_settings(records: Iterable[TrialRecord], max_slowdown: float = 0.02) -> list[SettingResult]:
    """One `SettingResult` per (env_id, backend, budget_bytes, conf), ordered by group, default first.

    Records of different workload definitions do not compare: mixing them is refused."""
    records = list(records)
    hashes = sorted({r.workload_hash for r in records})
    if len(hashes) > 1:
        raise ResultsError(f"trial records of {len(hashes)} different workload definitions ({', '.join(hashes)}) "
                           f"cannot be compared in one selection; select one workload hash")
    by_setting: dict[tuple, list[TrialRecord]] = {}
    for record in records:
        by_setting.setdefault(setting_key(record), []).append(record)
    return [_summarize_one(key, tuple(sorted(by_setting[key], key=lambda r: r.repeat)),
                           by_setting.get(key[:3] + ("",), []), max_slowdown)
            for key in sorted(by_setting, key=_order)]


def ranked(settings: Iterable[SettingResult]) -> list[SettingResult]:
    """Fitting settings by peak reserved (simpler first on equal peaks), then the failures."""
    failures = [state.value for state in _FAILURE_ORDER]
    return sorted(settings, key=lambda s: (not s.fits, s.peak_reserved_bytes if s.fits else 0,
                                           failures.index(s.state) if not s.fits else 0, s.complexity, s.conf))


def pareto_front(settings: Iterable[SettingResult]) -> list[SettingResult]:
    """Fitting settings with a throughput that no other beats on both memory (lower) and throughput (higher),
    by increasing peak reserved."""
    points = [s for s in settings if s.fits and s.throughput is not None and s.peak_reserved_bytes is not None]
    front, best_tput = [], float("-inf")
    for s in sorted(points, key=lambda s: (s.peak_reserved_bytes, -s.throughput.median)):
        if s.throughput.median > best_tput:
            front.append(s)
            best_tput = s.throughput.median
    return front


def format_rate(value: float | None, unit: str | None = None) -> str:
    """'12,345 tokens/s', '3.21 samples/s'; '-' for None."""
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit or 'units'}/s"


def _pct(a: float, b: float) -> str:
    """a against b as a signed percentage: '-33.3%'."""
    return f"{(a / b - 1) * 100:+.1f}%" if b else "n/a"


def _within(a: int, b: int, tie: float) -> bool:
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
    # Set by `sweeper.analyze` from sweep.json: fewer recorded than planned = an interrupted sweep.
    trials_recorded: int = 0
    trials_planned: int | None = None

    @property
    def simulated(self) -> bool:
        return self.backend == SIM

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
    return compare(base.throughputs, s.throughputs, max_slowdown)


def _failure(s: SettingResult) -> str:
    n, failed = len(s.trials), s.failed_repeats
    what = {"oom": "does not fit: out of memory", "crashed": "crashed", "timeout": "timed out",
            "mismatch": "the allocator settings that took effect differ from those asked for"}[s.state]
    budget = f" under the {format_bytes(s.budget_bytes)} budget" if s.state == "oom" and s.budget_bytes else ""
    detail = f" ({s.error})" if s.error and s.state != "oom" else ""
    return f"{what}{budget} in {failed} of {n} repeat{'s' if n != 1 else ''}{detail}"


def _slowdown(c: Comparison, max_slowdown: float) -> str:
    return (f"{(1 - c.ratio) * 100:.1f}% slower than the default, significantly beyond the {max_slowdown:.0%} "
            f"allowance (one-sided Welch p = {c.p_slower:.2g})")


def _too_slow(c: Comparison | None, max_slowdown: float) -> bool:
    # With one repeat a side there is no test, and one process's throughput moves ±6% (outliers 20% low) on its
    # own: a single pair of runs cannot show a slowdown, so it refuses nothing; the reasons say it is untested.
    return c is not None and c.slower_beyond_tolerance


def _rejection(s: SettingResult, base: SettingResult | None, max_slowdown: float) -> str | None:
    """Why `s` may not be recommended, or None when it may."""
    if not s.fits:
        return _failure(s)
    if s.is_default or base is None or not base.fits:
        return None
    if s.peak_reserved_bytes > base.peak_reserved_bytes:
        return (f"raises peak reserved to {format_bytes(s.peak_reserved_bytes)} "
                f"({_pct(s.peak_reserved_bytes, base.peak_reserved_bytes)} against the default's "
                f"{format_bytes(base.peak_reserved_bytes)})")
    if s.simulated and (s.num_alloc_retries or 0) > (base.num_alloc_retries or 0):
        return (f"needs {s.num_alloc_retries} alloc retries against the default's {base.num_alloc_retries or 0}: "
                f"each retry frees the cache and synchronises the device, a slowdown the replay cannot time")
    c = _comparison(s, base, max_slowdown)
    if _too_slow(c, max_slowdown):
        saved = base.peak_reserved_bytes - s.peak_reserved_bytes
        return f"saves {format_bytes(saved)} but is {_slowdown(c, max_slowdown)}"
    return None


def _throughput_reason(best: SettingResult, base: SettingResult, max_slowdown: float) -> str:
    c = _comparison(best, base, max_slowdown)
    if c is None:
        return "throughput was not compared (no throughput measured on one side)"
    medians = (f"median {format_rate(best.throughput.median, best.unit)} against "
               f"{format_rate(base.throughput.median, base.unit)}")
    if c.p_value is None:
        return (f"throughput {c.ratio:.3f}x the default's ({medians}): NOT TESTED, one repeat cannot tell a "
                f"difference from noise (fresh processes vary by several percent); confirm with --repeats 3 or more")
    if not c.significant:
        return (f"throughput {c.ratio:.3f}x the default's ({medians}): no significant difference "
                f"(Welch p = {c.p_value:.2g})")
    if abs(c.ratio - 1) < NEGLIGIBLE:
        return (f"throughput {c.ratio:.3f}x the default's ({medians}): statistically detectable (Welch p = "
                f"{c.p_value:.2g}) but under {NEGLIGIBLE:.0%}: no practical difference")
    allowance = f", inside the {max_slowdown:.0%} allowance" if c.ratio < 1 else ""
    return (f"throughput {c.ratio:.3f}x the default's ({medians}): significantly {c.verdict} "
            f"(Welch p = {c.p_value:.2g}){allowance}")


SIMULATED_NOTE = ("simulated: decided by replaying a recorded allocation trace, on memory alone "
                  "(no throughput measured)")
SMALL_GAIN = 0.10  # below this saving the reasons say that the default is about as good
NEGLIGIBLE = 0.01  # a throughput difference below this is called negligible even when a test can detect it


def _memory_reason(best: SettingResult, base: SettingResult) -> str:
    saved = base.peak_reserved_bytes - best.peak_reserved_bytes
    text = (f"peak reserved {format_bytes(best.peak_reserved_bytes)} against the default's "
            f"{format_bytes(base.peak_reserved_bytes)} ({_pct(best.peak_reserved_bytes, base.peak_reserved_bytes)}, "
            f"saves {format_bytes(saved)})")
    if best.reserved_ratio is not None and base.reserved_ratio is not None:
        text += f"; reserved/allocated {best.reserved_ratio:.2f} against {base.reserved_ratio:.2f}"
    if saved < SMALL_GAIN * base.peak_reserved_bytes:
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
        reasons.append("the default was not run in this group: chosen on peak reserved alone")
    elif not base.fits:
        reasons.append(f"the default {_failure(base)}; {best.label} is the lowest peak reserved "
                       f"({format_bytes(best.peak_reserved_bytes)}) of the {len(eligible)} settings that fit")
    elif best.is_default:
        others = [s for s in eligible if not s.is_default]
        text = (f"no setting lowers peak reserved by more than {tie:.0%} below the default's "
                f"{format_bytes(base.peak_reserved_bytes)} and meets the rules: keep the default")
        if others:
            low = min(others, key=lambda s: s.peak_reserved_bytes)
            text += (f" (closest: {low.label} at {format_bytes(low.peak_reserved_bytes)}, "
                     f"{_pct(low.peak_reserved_bytes, base.peak_reserved_bytes)})")
        reasons.append(text)
        lower_rejected = [s for s in members if s.fits and s.peak_reserved_bytes < base.peak_reserved_bytes
                          and all(s is not e for e in eligible)]
        if lower_rejected:
            reasons.append(f"{len(lower_rejected)} setting(s) with less memory were refused: "
                           + "; ".join(f"{s.label} {_rejection(s, base, max_slowdown)}" for s in lower_rejected))
    else:
        reasons.append(_memory_reason(best, base))
        if best.simulated:
            reasons.append(f"needs {best.num_alloc_retries or 0} alloc retries, as many as or fewer than the "
                           f"default's {base.num_alloc_retries or 0}")
        else:
            reasons.append(_throughput_reason(best, base, max_slowdown))
    tied = [s for s in eligible if s is not best and _within(s.peak_reserved_bytes, best.peak_reserved_bytes, tie)]
    if tied and not best.is_default:
        reasons.append(f"{', '.join(s.label for s in tied)} came within {tie:.0%} of its peak reserved; "
                       f"it wins the tie as the simpler setting ({best.complexity} key(s))")
    if best.memory_spread > 0:
        reasons.append(f"caution: its peak reserved disagreed across repeats by {best.memory_spread:.1%} "
                       f"(the table shows the median)")
    return reasons


def _why_not(s: SettingResult, best: SettingResult | None, base: SettingResult | None,
             max_slowdown: float, tie: float) -> str:
    rejected = _rejection(s, base, max_slowdown)
    if rejected or best is None:
        return rejected or "not chosen"
    extra, diff = s.peak_reserved_bytes - best.peak_reserved_bytes, ""
    c = _comparison(s, base, max_slowdown)
    if c is not None:
        diff = f"; throughput {c.ratio:.3f}x the default's ({c.verdict})"
    if _within(s.peak_reserved_bytes, best.peak_reserved_bytes, tie):
        return (f"ties with the winner on peak reserved ({format_bytes(s.peak_reserved_bytes)}, "
                f"{_pct(s.peak_reserved_bytes, best.peak_reserved_bytes)}) but sets {s.complexity} key(s) "
                f"against {best.complexity}{diff}")
    return (f"costs {format_bytes(extra)} more peak reserved than the winner "
            f"({_pct(s.peak_reserved_bytes, best.peak_reserved_bytes)}){diff}")


def _choose_group(members: list[SettingResult], max_slowdown: float, tie: float) -> Choice:
    base = next((s for s in members if s.is_default), None)
    eligible = [s for s in members if _rejection(s, base, max_slowdown) is None]
    best = None
    if eligible:
        low = min(s.peak_reserved_bytes for s in eligible)
        tied = [s for s in eligible if _within(s.peak_reserved_bytes, low, tie)]
        best = min(tied, key=lambda s: (s.complexity, s.peak_reserved_bytes, s.conf))
    first = members[0].trials[0]
    reasons = _reasons(best, base, members, eligible, max_slowdown, tie)
    caveats = [SIMULATED_NOTE] if best is not None and best.simulated else []
    return Choice(
        env_id=first.env_id, backend=first.backend, budget_bytes=first.budget_bytes, best=best, baseline=base,
        reasons=tuple(caveats + reasons), decision=reasons[0],
        runners_up=tuple((s, _why_not(s, best, base, max_slowdown, tie)) for s in ranked(members) if s is not best),
        max_slowdown=max_slowdown, tie=tie, env=dict((best or base or members[0]).trials[0].env),
        workload=first.workload, workload_hash=first.workload_hash)


def choose(settings: Iterable[SettingResult], max_slowdown: float = 0.02, tie: float = 0.01) -> list[Choice]:
    """One `Choice` per (env_id, backend, budget_bytes), in the order the groups first appear."""
    groups: dict[tuple, list[SettingResult]] = {}
    for s in settings:
        groups.setdefault(s.group, []).append(s)
    return [_choose_group(members, max_slowdown, tie) for members in groups.values()]
