"""Repeats until the answer is known (`--repeats auto`): which settings the next round measures, and how precise
the answer got. Pure functions over the settings measured so far; the sweeper runs the rounds.

A round runs the default and then every setting still in contention once each, back to back; the next round's
default (or, after the last round, one closing run of the default) follows at once, so each setting ran between
two runs of the default (who is in contention is decided after a round's default ran, from bracketed rounds), and its throughput is compared round by round with the default's interpolated between
them (`select.bracket_pairs`, `stats.compare_paired`): a machine drifting during the round favours no one. Between fresh processes throughput moves by
several percent, so a fixed number of repeats either wastes GPU time or cannot tell a 2% slowdown from noise;
instead a setting leaves contention at once when it failed (OOM, crash, time-out, mismatch), and after at least
MIN_ROUNDS rounds (so that every setting in the table has a tested throughput figure) when

- it uses more memory than the default (never recommended), or
- its throughput is significantly slower than the default beyond `max_slowdown` (refused), or
- the 95% interval of its ratio to the default is no wider than ±`max_slowdown` (the question is answered), or
- it cannot win: a setting needing less memory (beyond a tie) has already been answered and is not refused,

or when `max_repeats` rounds or the time budget are spent (pyperf and asv also bound a benchmark by a count and
a time). Memory needs no repeats: a seeded workload's peaks repeat to the byte.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI reads DEFAULT_MAX_REPEATS at start-up, before scipy (under select) is wanted
    from .choice import SettingResult

MIN_ROUNDS = 3          # a t-interval from two pairs is too wide to mean much, and a lucky one too narrow
DEFAULT_MAX_REPEATS = 10
TIE = 0.01              # as select.choose's tie


@dataclass(frozen=True)
class Standing:
    """Where one setting stands after the rounds so far: in contention (`open`) or not, and why."""

    conf: str
    open: bool
    why: str


def _answered(s: SettingResult, max_slowdown: float) -> bool:
    c = s.vs_default
    return c is not None and c.half_width is not None and c.half_width <= max_slowdown


def _refused_slow(s: SettingResult) -> bool:
    return s.vs_default is not None and s.vs_default.slower_beyond_tolerance


def standings(group: list[SettingResult], planned: list[str], rounds_done: int, max_slowdown: float) -> list[Standing]:
    """Each planned non-default setting of one group (one environment, backend and budget), in planned order.
    `group` holds what was measured so far (any order; settings not yet run may be missing)."""
    from .choice import within

    by_conf = {s.conf: s for s in group}
    base = by_conf.get("")
    out = []
    for conf in planned:
        if conf == "":
            continue
        s = by_conf.get(conf)
        if s is None:
            out.append(Standing(conf, True, "not measured yet"))
        elif not s.fits:
            out.append(Standing(conf, False, f"out: {s.state}"))
        elif base is None or not base.fits:
            out.append(Standing(conf, False, "the default did not run to the end: no throughput to compare with"))
        elif s.vs_default is None:
            out.append(Standing(conf, False, "no throughput measured"))
        elif rounds_done < MIN_ROUNDS:
            out.append(Standing(conf, True, f"fewer than {MIN_ROUNDS} rounds"))
        elif s.peak > base.peak:
            out.append(Standing(conf, False, f"out: more {s.memory_measure} than the default"))
        elif _refused_slow(s):
            out.append(Standing(conf, False, f"out: significantly slower than the default beyond "
                                             f"{max_slowdown:.0%}"))
        elif _answered(s, max_slowdown):
            out.append(Standing(conf, False, f"answered: interval ±{s.vs_default.half_width:.1%}"))
        else:
            winner = next((t for t in group if t.conf not in ("", conf) and t.fits and _answered(t, max_slowdown)
                           and not _refused_slow(t) and t.peak < s.peak and not within(t.peak, s.peak, TIE)), None)
            if winner is not None:
                out.append(Standing(conf, False, f"cannot win: {winner.label} needs less memory and is answered"))
            else:
                out.append(Standing(conf, True, f"interval ±{s.vs_default.half_width or math.inf:.1%} wider than "
                                                f"±{max_slowdown:.0%}"))
    return out


def contenders(group: list[SettingResult], planned: list[str], round_index: int, max_slowdown: float) -> list[str]:
    """The settings that round `round_index` runs after its default, in planned order; [] when none is open.
    (The next round's default, or a closing run, follows them: `select.bracket_pairs`.)"""
    return [st.conf for st in standings(group, planned, round_index, max_slowdown) if st.open]


def precision_note(detectable: float | None, rounds: int, max_slowdown: float, *, auto: bool,
                   max_repeats: int) -> str:
    """One sentence for summary.md and choice.json: the smallest slowdown the sweep could detect and, when the
    goal (±max_slowdown) was not reached, how far it got and why."""
    if detectable is None:
        return ("throughput was not compared with an interval (fewer than 2 rounds with both the default and the "
                "setting): no slowdown could be detected")
    got = f"the smallest slowdown this sweep could detect is {detectable:.1%} (95% interval ±{detectable:.1%}"
    if detectable <= max_slowdown:
        return got + f" after {rounds} rounds, within the ±{max_slowdown:.0%} goal)"
    if not auto:
        why = f"--repeats fixed {rounds} rounds"
    elif rounds >= max_repeats:
        why = f"the sweep stopped at --max-repeats {max_repeats}"
    else:
        why = f"the time budget ran out (or the sweep was interrupted) after {rounds} rounds"
    need = ""
    if rounds >= 2:
        more = _rounds_needed(detectable, rounds, max_slowdown)
        need = f"; at this spread between rounds ±{max_slowdown:.0%} needs about {more} rounds"
    return got + f"): wider than the ±{max_slowdown:.0%} goal because {why}{need}"


def _rounds_needed(detectable: float, rounds: int, goal: float) -> int:
    """Rounds whose t-interval would be ±goal at the spread implied by a half-width `detectable` over `rounds`."""
    from scipy import stats

    sd = math.log1p(detectable) * math.sqrt(rounds) / float(stats.t.ppf(0.975, rounds - 1))
    n = 2
    while n < 10_000 and float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) > math.log1p(goal):
        n += 1
    return n
