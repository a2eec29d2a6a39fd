"""The choice: per (environment, backend, budget) the setting to recommend, with its reasons as data
(`reasons.py`; `report/words.py` says them).

Rules (issue 2 §6, issue 8): the winner is the preferred setting (`order.py`: the lowest memory, ties to a native
allocator, a peak that repeats, fewer keys) among those that may be recommended: that fit and are not significantly
slower than the default by more than `max_slowdown`. A setting that raises memory over the default's is never
recommended, so the default stays unless something beats it by more than the tie. Two settings' memories are
always the pair's own comparison (`SettingResult.compared_with`: peak reserved within a backend, device memory
across backends), and so are the figures the reasons quote. Replayed traces ('sim') have no
throughput: they are judged on memory, and a setting that needs more release-and-retry rounds than the default
(each one synchronises the device) is refused. What a short trial cannot show refuses a setting before any figure
does, or qualifies the winner (`safety.py`): a known problem for the features the job used, a growth.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, TypeGuard

from ..errors import ResultsError
from ..results.choices import ChoiceRecord
from ..results.figures import Comparison, MemoryMeasure
from ..results.provenance import provenance
from ..results.records import Backend
from ..settings.known import Feature
from .device import DEVICE_AGREEMENT
from .order import beaten_by, preferred, ranked, tie_rule, within
from .parameters import DEFAULT_MAX_SLOWDOWN, DEFAULT_TIE
from .reasons import Code, Reason
from .quoted import (AgainstWinner, CardPeak, Contaminated, ContaminatedSetting, DefaultFailed, DeviceSpread,
                     DryRunCard, Failed, KeepDefault, Measure, MoreMemory, NothingFits, RefusedLower, Retries,
                     SavesMemory, Spread, StateCount, Throughput, TieBreak, Tied, Ties, TooSlow, Unstable, WholeCard)
from .rounds import sequential
from .safety import Safety, job_features, safety, target_torch
from .sequential import Outcome
from .speed import SpeedPrediction
from .summary import SettingResult

SMALL_GAIN = 0.10  # below this saving the reasons say that the default is about as good
NEGLIGIBLE = 0.01  # a throughput difference below this is called negligible even when a test can detect it


@dataclass(frozen=True)
class Choice:
    """The decision for one (environment, backend, budget). `best` is None when nothing fits."""

    env_id: str
    backend: Backend
    budget_bytes: int | None
    best: SettingResult | None
    baseline: SettingResult | None   # the default's result; None only if the default was not run here
    reasons: tuple[Reason, ...]      # caveats first, then the decision and what supports or qualifies it
    runners_up: tuple[tuple[SettingResult, Reason], ...]
    decision: Reason                 # the one reason that decided (`reasons` adds caveats around it)
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN
    tie: float = DEFAULT_TIE
    env: dict = field(default_factory=dict)   # the group's provenance (torch, gpu, ...) from its records
    workload: str = ""
    workload_hash: str = ""
    compared: tuple[SettingResult, ...] = ()   # the group's fitting settings with a throughput comparison
    group: tuple[SettingResult, ...] = ()   # every setting of the group, ranked as the tables list them (`ranked`)
    # How precise the throughput comparison got (`rounds.precision`; set from what the sweep asked, sweep.json).
    precision: Reason | None = None
    # Set from sweep.json as well: fewer recorded than planned = an interrupted sweep.
    trials_recorded: int = 0
    trials_planned: int | None = None
    finished: bool = True            # the sweep ran to its end (SweepInfo.finished)
    features: tuple[Feature, ...] = ()   # what the job used, as its trials observed it (known.Feature order)
    # Each replayed setting's speed predicted from its driver work (`speed.predictions`, set by `decision.decide`
    # where the folder has a calibration): conf -> prediction.
    predictions: dict[str, SpeedPrediction] = field(default_factory=dict)

    @property
    def simulated(self) -> bool:
        return self.backend == Backend.SIM

    @property
    def fits(self) -> bool:
        return self.best is not None

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
        """The sweep ran to its end (where it planned no count of trials, as with rounds that stop once the answer
        is known, a hybrid's finalists or a search, that alone says it), and recorded every trial it planned."""
        return self.finished and (self.trials_planned is None or self.trials_recorded >= self.trials_planned)

    @property
    def verdict(self) -> str:
        if self.best is None:
            return "nothing fits"
        if self.simulated or self.best.throughput is None:
            return "not measured"
        if self.best.is_default:
            return "no significant difference"
        return self.best.vs_default.verdict if self.best.vs_default else "not measured"

    @property
    def throughput_ratio(self) -> float | None:
        """The winner's throughput over the default's: 1.0 when the default won with a throughput."""
        if self.best is not None and self.best.is_default and self.best.throughput is not None:
            return 1.0
        return self.best.vs_default.ratio if self.best is not None and self.best.vs_default else None


def _failed(s: SettingResult) -> Failed:
    return Failed(s.state, s.failed_repeats, len(s.trials), s.budget_bytes, s.error)


def _too_slow(c: Comparison | None, s: SettingResult, max_slowdown: float,
              horizon: int | None) -> TypeGuard[Comparison]:
    # With one repeat a side there is no test, and one process's throughput moves ±6% (outliers 20% low) on its
    # own: a single pair of runs cannot show a slowdown, so it refuses nothing; the reasons say it is untested.
    # Rounds (`--repeats auto`, `horizon` their cap) refuse by the sequential test they looked with after every
    # round: one more test at 5% on all of them, at the cap, would refuse a setting at the allowance twice as often.
    if c is None:
        return False
    if horizon is not None and len(s.pairs) >= 2:
        outcome = sequential(s, max_slowdown, horizon).outcome
        # Rounds cut before the test could decide (a time budget, an interrupt, or a folder whose rounds an older
        # rule stopped) answer nothing: there the fixed test on what was measured refuses what is shown slower.
        if outcome is not Outcome.CONTINUE:
            return outcome is Outcome.REFUSED
    return c.slower_beyond_tolerance


def _rejection(s: SettingResult, base: SettingResult | None, max_slowdown: float, unsafe: Safety,
               horizon: int | None) -> Reason | None:
    """Why `s` may not be recommended, or None when it may. A known problem comes first: it may be why `s`
    failed, and it refuses `s` whatever `s` measured."""
    if unsafe.refusal is not None:
        return unsafe.refusal
    if not s.fits:
        return Reason(Code.FAILED, _failed(s))
    if s.is_default:
        return None
    if unsafe.growth is not None and unsafe.growth.code is Code.GROWING:
        return unsafe.growth
    if base is None or not base.fits:
        return None
    measure, mine, default = s.compared_with(base)
    if mine > default:
        return Reason(Code.MORE_MEMORY, MoreMemory(measure, mine, default))
    if s.simulated and (s.num_alloc_retries or 0) > (base.num_alloc_retries or 0):
        return Reason(Code.MORE_RETRIES, Retries(s.num_alloc_retries, base.num_alloc_retries))
    c = s.vs_default
    if _too_slow(c, s, max_slowdown, horizon):
        return Reason(Code.TOO_SLOW, TooSlow(default - mine, c, max_slowdown))
    return None


def _throughput_reason(best: SettingResult, base: SettingResult, max_slowdown: float) -> Reason:
    c = best.vs_default
    if c is None or best.throughput is None or base.throughput is None:
        return Reason(Code.THROUGHPUT_UNCOMPARED)
    figures = Throughput(c, best.throughput.median, base.throughput.median, best.unit, base.unit, max_slowdown,
                         NEGLIGIBLE)
    if c.p_value is None:
        return Reason(Code.THROUGHPUT_UNTESTED, figures)
    if not c.significant:
        return Reason(Code.THROUGHPUT_SAME, figures)
    if abs(c.ratio - 1) < NEGLIGIBLE:
        return Reason(Code.THROUGHPUT_NEGLIGIBLE, figures)
    return Reason(Code.THROUGHPUT_DIFFERS, figures)


def _memory_reason(best: SettingResult, base: SettingResult) -> Reason:
    measure, mine, default = best.compared_with(base)
    small = SMALL_GAIN if default - mine < SMALL_GAIN * default else None
    return Reason(Code.SAVES_MEMORY, SavesMemory(measure, mine, default, best.reserved_ratio, base.reserved_ratio,
                                                 small))


def _lower(s: SettingResult, base: SettingResult) -> bool:
    _, mine, default = s.compared_with(base)
    return mine < default


def tie_break(winner: SettingResult, loser: SettingResult, eligible: list[SettingResult], tie: float) -> TieBreak:
    beater = beaten_by(loser, eligible, tie)
    return TieBreak(tie_rule(winner, loser, eligible, tie), winner.complexity, loser.complexity,
                    loser.memory_spread, beater.conf if beater else None,
                    beater.compared_with(loser)[1] if beater else None, tie if beater else None)


def _kept(base: SettingResult, members: list[SettingResult], eligible: list[SettingResult],
          tie: float, unsafe: set[str]) -> list[Reason]:
    """The default won: nothing else lowers memory by more than the tie, and which lower settings were refused
    (those refused as unsafe are said apart, REFUSED_UNSAFE)."""
    others = [s.compared_with(base) + (s,) for s in eligible if not s.is_default]
    kept = KeepDefault(base.memory_measure, tie, base.peak)
    if others:   # the closest: the least memory against the default's, each pair on its own measure
        measure, mine, default, low = min(others, key=lambda o: (o[1] / o[2] if o[2] else 1.0, o[3].conf))
        kept = KeepDefault(measure, tie, default, low.conf, mine)
    reasons = [Reason(Code.KEEP_DEFAULT, kept)]
    lower_rejected = [s for s in members if s.fits and _lower(s, base) and all(s is not e for e in eligible)
                      and s.conf not in unsafe]
    if lower_rejected:
        reasons.append(Reason(Code.REFUSED_LOWER, RefusedLower(tuple(s.conf for s in lower_rejected))))
    return reasons


def _reasons(best: SettingResult | None, base: SettingResult | None, members: list[SettingResult],
             eligible: list[SettingResult], max_slowdown: float, tie: float, unsafe: set[str]) -> list[Reason]:
    if best is None:
        counts = sorted(Counter(s.state for s in members).items())
        return [Reason(Code.NOTHING_FITS, NothingFits(members[0].budget_bytes, len(members),
                                                      tuple(StateCount(state, n) for state, n in counts)))]
    if base is None:
        reasons = [Reason(Code.NO_DEFAULT, Measure(best.memory_measure))]
    elif not base.fits:
        reasons = [Reason(Code.DEFAULT_FAILED, DefaultFailed(_failed(base), best.conf, best.memory_measure,
                                                             best.peak, len(eligible)))]
    elif best.is_default:
        reasons = _kept(base, members, eligible, tie, unsafe)
    else:
        reasons = [_memory_reason(best, base),
                   Reason(Code.SIM_RETRIES, Retries(best.num_alloc_retries, base.num_alloc_retries))
                   if best.simulated else _throughput_reason(best, base, max_slowdown)]
    if best.memory_measure is MemoryMeasure.DEVICE:
        reasons.append(Reason(Code.DEVICE_MEMORY))
    reasons += _device_caveats(members, best.memory_measure)
    pairs = [(s, best.compared_with(s)) for s in eligible if s is not best]
    tied = [(s, measure, theirs, mine) for s, (measure, mine, theirs) in pairs if within(theirs, mine, tie)]
    if tied and not best.is_default:
        reasons.append(Reason(Code.TIES, Ties(best.conf, best.memory_measure, best.peak, tie, tuple(
            Tied(s.conf, theirs, tie_break(best, s, eligible, tie), measure, mine)
            for s, measure, theirs, mine in tied))))
    if best.unstable:
        reasons.append(Reason(Code.UNSTABLE, Unstable(best.memory_spread)))
    return reasons


def _device_caveats(members: list[SettingResult], measure: MemoryMeasure) -> list[Reason]:
    """Device figures not used because they were contaminated; where the group compares device memory, figures
    that moved between repeats (the lowest is used)."""
    reasons = []
    if bad := [s for s in members if s.contaminated]:
        reasons.append(Reason(Code.DEVICE_CONTAMINATED, Contaminated(tuple(
            ContaminatedSetting(s.conf, s.contaminated, s.device_peak_used_bytes) for s in bad))))
    moved = [s for s in members if s.device_disagrees and s.device_peak_used_bytes is not None]
    if moved and measure is MemoryMeasure.DEVICE:
        reasons.append(Reason(Code.DEVICE_SPREAD, DeviceSpread(tuple(
            Spread(s.conf, s.device_spread, s.device_peak_used_bytes or 0) for s in moved),
            DEVICE_AGREEMENT)))
    return reasons


def _whole_card(members: list[SettingResult]) -> list[Reason]:
    """The caveat on the settings that fit only by taking (nearly) the whole card, if any (device.WHOLE_CARD_*)."""
    full = sorted((s for s in members if s.whole_card), key=lambda s: s.peak)
    if not full:
        return []
    device = max(s.device_bytes or 0 for s in full)
    return [Reason(Code.WHOLE_CARD, WholeCard(full[0].memory_measure, device,
                                              tuple(CardPeak(s.conf, s.peak) for s in full)))]


def _why_not(s: SettingResult, best: SettingResult | None, base: SettingResult | None,
             max_slowdown: float, tie: float, unsafe: Safety, horizon: int | None,
             eligible: list[SettingResult]) -> Reason:
    if rejected := _rejection(s, base, max_slowdown, unsafe, horizon):
        return rejected
    assert best is not None   # with nothing to recommend, every setting has a rejection
    c = s.vs_default
    measure, mine, winner = s.compared_with(best)
    if within(mine, winner, tie):
        return Reason(Code.LOSES_TIE, AgainstWinner(measure, mine, winner, c, tie_break(best, s, eligible, tie)))
    return Reason(Code.COSTS_MORE, AgainstWinner(measure, mine, winner, c))


def _choose_group(members: list[SettingResult], max_slowdown: float, tie: float, horizon: int | None) -> Choice:
    base = next((s for s in members if s.is_default), None)
    first = members[0].trials[0]
    features = job_features(r for s in members for r in s.trials)
    torch_version = target_torch(first.env)
    safe = {s.conf: safety(s.setting, s.trials, torch_version, features) for s in members}
    eligible = [s for s in members if _rejection(s, base, max_slowdown, safe[s.conf], horizon) is None]
    best = preferred(eligible, tie)
    group = tuple(ranked(members))
    runners_up = tuple((s, _why_not(s, best, base, max_slowdown, tie, safe[s.conf], horizon, eligible))
                       for s in group if s is not best)
    unsafe = tuple(s.conf for s, why in runners_up if why.code in (Code.KNOWN_PROBLEM, Code.GROWING))
    reasons = _reasons(best, base, members, eligible, max_slowdown, tie, set(unsafe))
    reasons += [Reason(Code.REFUSED_UNSAFE, RefusedLower(unsafe))] if unsafe else []
    if best is not None:   # what qualifies the winner: its known problems that only warn, its growth check
        winner = safe[best.conf]
        reasons += list(winner.caveats) + ([winner.growth] if winner.growth is not None else [])
    caveats = [_replayed(best.trials[0].env)] if best is not None and best.simulated else []
    return Choice(
        env_id=first.env_id, backend=first.backend, budget_bytes=first.budget_bytes, best=best, baseline=base,
        reasons=tuple(caveats + reasons + _whole_card(members)), decision=reasons[0], runners_up=runners_up,
        max_slowdown=max_slowdown, tie=tie, env=dict((best or base or members[0]).trials[0].env),
        workload=first.workload, workload_hash=first.workload_hash,
        compared=tuple(s for s in members if s.fits and s.vs_default is not None), group=group,
        features=tuple(f for f in Feature if f in features))


def _replayed(env: dict) -> Reason:
    """A replay's caveat: of a recorded trace, or of a dry run's (its trials' environment says: results/provenance)."""
    dry = provenance(env, "a replayed trial's env 'dry_run'", ResultsError).dry_run
    return Reason(Code.SIMULATED) if dry is None else Reason(Code.DRY_RUN, DryRunCard(dry.card, dry.table,
                                                                                     dry.made_up, dict(dry.invented)))


def choose(settings: Iterable[SettingResult], tie: float = DEFAULT_TIE, horizon: int | None = None) -> list[Choice]:
    """One `Choice` per (env_id, backend, budget_bytes), in the order the groups first appear. The max slowdown is
    the one the settings' comparisons with the default were judged against (`summarize_settings`): applied once.
    `horizon`: the cap of the rounds that measured them (`--repeats auto`, sweep.json), None for a fixed number of
    repeats."""
    groups: dict[tuple, list[SettingResult]] = {}
    for s in settings:
        groups.setdefault(s.group, []).append(s)
    return [_choose_group(members, members[0].max_slowdown, tie, horizon) for members in groups.values()]


def something_to_export(choices: Iterable[Choice | ChoiceRecord]) -> bool:
    """Whether `alloctune export` has a setting to give: some group found one that fits (a choice, or its record).
    When none does, no output points to export (it would refuse)."""
    return any(choice.fits for choice in choices)
