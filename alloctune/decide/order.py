"""The choice's preference among settings, which the choice, the hybrid sweep's finalists, the rounds of `--repeats
auto` and the tables all use; built on the order by memory every ranking of settings shares
(`results/order.py`).

Settings that fit come first, then the failures, worst first (`SettingState`). Among those that fit the lowest
memory is preferred, two settings compared as `SettingResult.compared_with` says (peak reserved within a backend,
device memory across backends), but memories within `tie` of each other tie (`within`), and a tie goes,
in this order, to a native-allocator setting over a backend switch, to a setting whose peak repeated exactly over
one whose peak moved between repeats of the seeded workload, to fewer keys (the default has none), to the lower
peak, then by name (`tie_rank`). Because "within a tie" is not transitive, the order is built by taking the
preferred setting, then the preferred of the rest, and so on (`by_preference`); a setting within the tie of the
winner may so have lost before any tie rule was asked, as more than the tie above a third setting (`OUT_OF_TIE`). With no margin (`tie=0`, what the
tables use) it is plainly by memory, equal memories by the tie rules; on figures of one backend that repeat
exactly (a replay's) that is `results/order.by_memory`, the order every other ranking of settings builds on.

Light on purpose (no statistics): the CLI imports `rounds` at start-up.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Iterable

from ..results.order import simpler
from .parameters import DEFAULT_TIE

if TYPE_CHECKING:
    from .summary import SettingResult


def within(a: int, b: int, tie: float = DEFAULT_TIE) -> bool:
    """a and b tie: they differ by at most `tie` of the larger."""
    return abs(a - b) <= tie * max(a, b)


def tie_rank(s: SettingResult) -> tuple:
    """Among settings whose memory ties, the smallest wins (see the module). Settings of one backend that tie are
    told apart by peak reserved: the backend comes first, so the peak only decides within one."""
    return (s.switches_backend, s.unstable, s.complexity, s.peak_reserved_bytes or 0, s.conf)


def lower_beyond_tie(a: SettingResult, b: SettingResult, tie: float = DEFAULT_TIE) -> bool:
    """`a` comes before `b` on memory alone, whatever the tie rules say: it needs less, by more than a tie."""
    _, mine, theirs = a.compared_with(b)
    return mine < theirs and not within(mine, theirs, tie)


def contenders(settings: Iterable[SettingResult], tie: float = DEFAULT_TIE) -> list[SettingResult]:
    """Those of `settings` that fit and that no other needs less memory than beyond `tie` (on one measure: those
    within `tie` of the lowest): the settings the tie rules choose among. (Were the two measures ever to disagree
    so that every setting is beaten, all take part.)"""
    fitting = [s for s in settings if s.fits]
    return [s for s in fitting if not any(lower_beyond_tie(t, s, tie) for t in fitting)] or fitting


def preferred(settings: Iterable[SettingResult], tie: float = DEFAULT_TIE) -> SettingResult | None:
    """The setting the preference takes first among those of `settings` that fit: the first of the `contenders` by
    `tie_rank`. None when none fits."""
    return min(contenders(settings, tie), key=tie_rank, default=None)


def by_preference(settings: Iterable[SettingResult], tie: float = DEFAULT_TIE) -> list[SettingResult]:
    """`settings` in the preference's order: those that fit, each the preferred of the ones left, then the
    failures, worst first, fewer keys first."""
    settings = list(settings)
    left, ordered = [s for s in settings if s.fits], []
    while (pick := preferred(left, tie)) is not None:
        ordered.append(pick)
        left = [s for s in left if s is not pick]
    failures = sorted((s for s in settings if not s.fits), key=lambda s: (s.state.rank, *simpler(s.setting)))
    return ordered + failures


def ranked(settings: Iterable[SettingResult]) -> list[SettingResult]:
    """The order tables and runners-up list settings in: the preference without a margin (by the memory they show,
    equal memories by the tie rules), then the failures."""
    return by_preference(settings, tie=0.0)


class TieRule(str, enum.Enum):
    """The rule of `tie_rank` that decided a tie."""

    NATIVE = "native"            # the winner keeps the native allocator, the other switches the backend
    STABLE = "stable"            # the winner's peak repeated exactly, the other's moved between repeats
    SIMPLER = "simpler"          # the winner sets fewer keys
    LOWER_PEAK = "lower_peak"
    NAME = "name"                # equal in every rule
    OUT_OF_TIE = "out_of_tie"    # no rule asked: the loser is more than the tie above a third setting, the winner not

    def __str__(self) -> str:
        return self.value


def beaten_by(loser: SettingResult, among: Iterable[SettingResult], tie: float = DEFAULT_TIE) -> SettingResult | None:
    """The setting of `among` that put `loser` out of the contenders (the lowest of those that need less memory than
    it beyond `tie`), or None where `loser` is a contender."""
    among = list(among)
    if any(s is loser for s in contenders(among, tie)):
        return None
    lower = [s for s in among if s.fits and lower_beyond_tie(s, loser, tie)]
    return min(lower, key=lambda s: (s.compared_with(loser)[1], tie_rank(s)), default=None)


def tie_rule(winner: SettingResult, loser: SettingResult, among: Iterable[SettingResult] = (),
             tie: float = DEFAULT_TIE) -> TieRule:
    """Why `winner` came before `loser`, which ties it, where both were among `among` (the settings the preference
    chose from): `loser` out of the contenders, or the first rule of `tie_rank` that tells the two apart, as the
    winner's advantage."""
    if beaten_by(loser, among, tie) is not None:
        return TieRule.OUT_OF_TIE
    if loser.switches_backend and not winner.switches_backend:
        return TieRule.NATIVE
    if loser.unstable and not winner.unstable:
        return TieRule.STABLE
    if loser.complexity != winner.complexity:
        return TieRule.SIMPLER
    _, won, lost = winner.compared_with(loser)
    return TieRule.LOWER_PEAK if won != lost else TieRule.NAME
