"""Repeats until the answer is known (`--repeats auto`): which settings the next round measures. Pure functions
over the settings measured so far; the sweeper runs the rounds, and `precision.py` says how precise the answer got.

A round runs the default and then every setting still in contention once each, back to back; the next round's
default (or, after the last round, one closing run of the default) follows at once, so each setting ran between
two runs of the default (who is in contention is decided after a round's default ran, from bracketed rounds), and
its throughput is compared round by round with the default's interpolated between them (`summary.bracket_pairs`,
`stats.compare_paired`): a machine drifting during the round favours no one. Between fresh processes throughput
moves by several percent, so a fixed number of repeats either wastes GPU time or cannot tell a 2% slowdown from
noise; instead a setting leaves contention at once when it failed (OOM, crash, time-out, mismatch), and after at
least MIN_ROUNDS rounds (so that every setting in the table has a tested throughput figure) when

- it uses more memory than the default (never recommended), or
- its throughput is significantly slower than the default beyond `max_slowdown` (refused), or
- the 95% interval of its ratio to the default is no wider than ±`max_slowdown` (the question is answered), or
- it cannot win: a setting needing less memory (beyond a tie) has already been answered and is not refused,

or when `max_repeats` rounds or the time budget are spent (pyperf and asv also bound a benchmark by a count and
a time). Memory needs no repeats: a seeded workload's peaks repeat to the byte.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .order import lower_beyond_tie

if TYPE_CHECKING:  # the CLI reads DEFAULT_MAX_REPEATS at start-up, before scipy (under summary) is wanted
    from .summary import SettingResult, SettingState

MIN_ROUNDS = 3          # a t-interval from two pairs is too wide to mean much, and a lucky one too narrow
DEFAULT_MAX_REPEATS = 10


class Contention(str, enum.Enum):
    """Where one setting stands after the rounds so far. The first three keep it in contention."""

    NOT_MEASURED = "not_measured"
    TOO_FEW_ROUNDS = "too_few_rounds"   # fewer than MIN_ROUNDS
    TOO_WIDE = "too_wide"               # its interval is wider than ±max_slowdown
    FAILED = "failed"
    NO_BASELINE = "no_baseline"         # the default did not run to the end: no throughput to compare with
    NO_THROUGHPUT = "no_throughput"
    MORE_MEMORY = "more_memory"         # than the default: never recommended
    TOO_SLOW = "too_slow"               # significantly slower than the default beyond max_slowdown
    ANSWERED = "answered"               # its interval is within ±max_slowdown
    CANNOT_WIN = "cannot_win"           # a setting needing less memory (beyond a tie) is answered and not refused

    def __str__(self) -> str:
        return self.value


_OPEN = (Contention.NOT_MEASURED, Contention.TOO_FEW_ROUNDS, Contention.TOO_WIDE)


@dataclass(frozen=True)
class Standing:
    """One setting's place after the rounds so far, and the figures behind it."""

    conf: str
    why: Contention
    state: SettingState | None = None   # FAILED: how
    half_width: float | None = None     # ANSWERED, TOO_WIDE: the interval's (None: no interval yet)
    winner: str | None = None           # CANNOT_WIN: the setting that needs less memory and is answered

    @property
    def open(self) -> bool:
        return self.why in _OPEN


def _answered(s: SettingResult, max_slowdown: float) -> bool:
    c = s.vs_default
    return c is not None and c.half_width is not None and c.half_width <= max_slowdown


def _refused_slow(s: SettingResult) -> bool:
    return s.vs_default is not None and s.vs_default.slower_beyond_tolerance


def _standing(s: SettingResult, group: list[SettingResult], base: SettingResult | None, rounds_done: int,
              max_slowdown: float) -> Standing:
    if not s.fits:
        return Standing(s.conf, Contention.FAILED, state=s.state)
    if base is None or not base.fits:
        return Standing(s.conf, Contention.NO_BASELINE)
    if s.vs_default is None:
        return Standing(s.conf, Contention.NO_THROUGHPUT)
    if rounds_done < MIN_ROUNDS:
        return Standing(s.conf, Contention.TOO_FEW_ROUNDS)
    if s.peak > base.peak:
        return Standing(s.conf, Contention.MORE_MEMORY)
    if _refused_slow(s):
        return Standing(s.conf, Contention.TOO_SLOW)
    if _answered(s, max_slowdown):
        return Standing(s.conf, Contention.ANSWERED, half_width=s.vs_default.half_width)
    winner = next((t for t in group if t.conf not in ("", s.conf) and t.fits and _answered(t, max_slowdown)
                   and not _refused_slow(t) and lower_beyond_tie(t, s)), None)
    if winner is not None:
        return Standing(s.conf, Contention.CANNOT_WIN, winner=winner.conf)
    return Standing(s.conf, Contention.TOO_WIDE, half_width=s.vs_default.half_width)


def standings(group: list[SettingResult], planned: list[str], rounds_done: int, max_slowdown: float) -> list[Standing]:
    """Each planned non-default setting of one group (one environment, backend and budget), in planned order.
    `group` holds what was measured so far (any order; settings not yet run may be missing)."""
    by_conf = {s.conf: s for s in group}
    base = by_conf.get("")
    return [Standing(conf, Contention.NOT_MEASURED) if conf not in by_conf
            else _standing(by_conf[conf], group, base, rounds_done, max_slowdown)
            for conf in planned if conf != ""]


def contenders(group: list[SettingResult], planned: list[str], round_index: int, max_slowdown: float) -> list[str]:
    """The settings that round `round_index` runs after its default, in planned order; [] when none is open.
    (The next round's default, or a closing run, follows them: `summary.bracket_pairs`.)"""
    return [st.conf for st in standings(group, planned, round_index, max_slowdown) if st.open]
