"""What a short trial cannot tell about a setting, as reasons: the known problems it has on the choice's torch for
the features the job used (the table of `settings/known.py`; the features from the trials' records, as the
start-up hook observed them), and the opt-in growth check (`growth.py`, on the samples of `--check-growth`).

Policy: a problem that breaks the job or wastes memory refuses the setting (KNOWN_PROBLEM): a crash or hang at
scale, or reserved memory that grows over a long run, is what a short trial does not show, so its figures cannot
clear it. One that leaves the setting, or part of it, without effect only warns (KNOWN_CAVEAT): the trials
measured what the job really got. A setting whose reserved memory kept rising while allocated did not is refused
(GROWING), unless it is the default, which is the baseline: then the choice says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..results.records import TrialRecord, TrialState
from ..settings.conf import AllocConf
from ..settings.known import Feature, Problem, Severity, problems
from .growth import Growth, Sample, Verdict, growth
from .reasons import Code, Reason
from .quoted import GrowthCheck, KnownProblem

REFUSING = frozenset({Severity.BROKEN, Severity.WASTEFUL})
_FEATURES = {f.value for f in Feature}


@dataclass(frozen=True)
class Safety:
    """One setting's known problems (KNOWN_PROBLEM ones first, worst first, then KNOWN_CAVEAT ones) and its
    growth check (GROWING, GROWTH_STEADY or GROWTH_UNDECIDED; None where it was not asked)."""

    known: tuple[Reason, ...] = ()
    growth: Reason | None = None

    @property
    def refusal(self) -> Reason | None:
        """The known problem that refuses the setting, if any."""
        return next((r for r in self.known if r.code is Code.KNOWN_PROBLEM), None)

    @property
    def caveats(self) -> tuple[Reason, ...]:
        return tuple(r for r in self.known if r.code is Code.KNOWN_CAVEAT)


def target_torch(env: dict) -> str | None:
    """The torch a decision is for: the one that ran the trials, or for a replay the one simulated."""
    return env.get("simulated_as") or env.get("torch")


def job_features(trials: Iterable[TrialRecord]) -> frozenset[Feature]:
    """What the job used: the features any of its trials observed, whatever setting it ran (a setting that
    crashes before the job shares a tensor must not hide that the job does). Values a newer alloctune wrote
    that this one does not know are left out."""
    return frozenset(Feature(value) for r in trials for value in r.features or () if value in _FEATURES)


def safety(conf: AllocConf, trials: Iterable[TrialRecord], torch_version: str | None,
           features: frozenset[Feature]) -> Safety:
    """The known problems of `conf` on `torch_version` for a job that used `features`, and the growth check of
    its `trials`."""
    found = problems(conf, torch_version, features)
    refusing = [p for p in found if p.severity in REFUSING]
    known = ([_known(Code.KNOWN_PROBLEM, p, torch_version) for p in refusing]
             + [_known(Code.KNOWN_CAVEAT, p, torch_version) for p in found if p not in refusing])
    return Safety(tuple(known), _growth(trials))


def _known(code: Code, p: Problem, torch_version: str | None) -> Reason:
    features = tuple(f for f in Feature if f in p.when)
    return Reason(code, KnownProblem(p.id, p.severity, p.source, torch_version, features))


def _growth(trials: Iterable[TrialRecord]) -> Reason | None:
    """The growth check over the repeats that recorded samples: GROWING when any grew, with the one that grew
    most; STEADY when all that could be compared were steady; UNDECIDED when none could."""
    rows = [r.measurement.growth_samples for r in trials
            if r.state is TrialState.OK and r.measurement is not None and r.measurement.growth_samples is not None]
    if not rows:
        return None
    decided = [g for g in (growth([Sample(*row) for row in samples]) for samples in rows)
               if g.verdict is not Verdict.UNDECIDED]
    growing = [g for g in decided if g.verdict is Verdict.GROWING]
    if not decided:
        return Reason(Code.GROWTH_UNDECIDED, GrowthCheck(len(rows), 0, 0))
    worst = max(growing or decided, key=_rise)
    return Reason(Code.GROWING if growing else Code.GROWTH_STEADY,
                  GrowthCheck(len(rows), len(decided), len(growing), worst.at_k, worst.at_2k))


def _rise(g: Growth) -> int:
    assert g.at_k is not None and g.at_2k is not None   # a decided check compared two samples
    return g.at_2k.reserved - g.at_k.reserved
