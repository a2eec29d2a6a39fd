"""Repeats until the answer is known (`--repeats auto`): which settings the next round measures, and about how many
trials are still to come. Pure functions over the settings measured so far (and, in a hybrid sweep, the replay's
predictions), and whether the time budget allows another round (`over_time_budget`); the sweeper runs the rounds,
and `precision.py` says how precise the answer got.

A round runs the default and then every setting still in contention once each, back to back, lowest memory first
(`order.by_preference`); the next round's default (or, after the last round, one closing run of the default)
follows at once, so each setting ran between two runs of the default (who is in contention is decided after a
round's default ran, from bracketed rounds), and its throughput is compared round by round with the default's
interpolated between them (`summary.bracket_pairs`, `stats.compare_paired`): a machine drifting during the round
favours no one.

Memory first. A seeded job's peak reserved repeats to the byte, and replay predicts the native allocator's exactly,
so memory needs one trial or none, while throughput needs rounds. A setting leaves contention as soon as its memory
is known (replayed, or measured once) and

- it needs more than the default (never recommended), or
- a candidate that is not refused (it fits, is not above the default, not too slow) needs less beyond the tie: it
  cannot win, so it gets no throughput rounds while that candidate stands; should every candidate with less memory
  be refused, it is measured then;

a backend switch whose memory is not known leaves it when a native candidate's peak reserved is within the tie of
the program's peak requested bytes (`backend_skip`). A setting still in contention leaves it when it failed (OOM,
crash, time-out, mismatch) and, after at least MIN_ROUNDS rounds of its own, when its throughput settles the
question by the sequential non-inferiority test at the `max_slowdown` margin (`sequential.py`, with `max_repeats`
rounds as its horizon): no slower than the margin (accepted) or slower beyond it (refused); looking after every
round keeps each error at 5%. Rounds stop when no setting is in contention, or `max_repeats` rounds or the time
budget are spent (pyperf and asv also bound a benchmark by a count and a time); a setting neither accepted nor
refused at `max_repeats` is inconclusive.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Mapping

from ..settings.conf import AllocConf
from .order import by_preference, lower_beyond_tie, within
from .parameters import DEFAULT_TIE
from .sequential import Look, Outcome, look

if TYPE_CHECKING:  # the CLI reads DEFAULT_MAX_REPEATS at start-up, before scipy (under summary) is wanted
    from ..results.figures import MemoryMeasure, SettingState
    from .summary import SettingResult

MIN_ROUNDS = 3          # the first look: two pairs that happen to agree make a spread too small to trust
DEFAULT_MAX_REPEATS = 10
# The most repeats a sweep takes (fixed, or --max-repeats): an interval narrows as 1/sqrt(rounds), ten times from 10
# rounds to 1000, and a sweep lists its trials before the first runs (a billion would not fit in memory).
MAX_REPEATS = 1000


class Contention(str, enum.Enum):
    """Where one setting stands after the rounds so far. The first three keep it in contention."""

    NOT_MEASURED = "not_measured"
    TOO_FEW_ROUNDS = "too_few_rounds"   # fewer than MIN_ROUNDS of its own
    TOO_WIDE = "too_wide"               # neither accepted nor refused yet, rounds left
    FAILED = "failed"
    NO_BASELINE = "no_baseline"         # the default did not run to the end: no throughput to compare with
    NO_THROUGHPUT = "no_throughput"
    MORE_MEMORY = "more_memory"         # than the default: never recommended
    LOSES_ON_MEMORY = "loses_on_memory"   # a candidate not refused needs less memory beyond the tie (`winner`)
    BACKEND_SKIPPED = "backend_skipped"   # a backend switch that cannot need less than `winner` (`backend_skip`)
    TOO_SLOW = "too_slow"               # refused: slower than the default beyond max_slowdown (`sequential`)
    CLEARED = "cleared"                 # accepted: no slower than the default beyond max_slowdown
    INCONCLUSIVE = "inconclusive"       # neither at max_repeats rounds

    def __str__(self) -> str:
        return self.value


_OPEN = (Contention.NOT_MEASURED, Contention.TOO_FEW_ROUNDS, Contention.TOO_WIDE)


@dataclass(frozen=True)
class Standing:
    """One setting's place after the rounds so far, and the figures behind it."""

    conf: str
    why: Contention
    rounds: int = 0                     # rounds it was measured in
    memory_known: bool = False          # measured once, or replayed
    state: SettingState | None = None   # FAILED: how
    half_width: float | None = None     # TOO_SLOW, CLEARED, TOO_WIDE, INCONCLUSIVE: the interval's (None: none yet)
    ratio: float | None = None          # with half_width: its throughput against the default's
    winner: str | None = None           # LOSES_ON_MEMORY, BACKEND_SKIPPED: the candidate it cannot beat
    # MORE_MEMORY, LOSES_ON_MEMORY: the pair's measure and figures (this one's, the other's); BACKEND_SKIPPED: the
    # winner's peak reserved and the program's peak requested bytes
    measure: MemoryMeasure | None = None
    memory_bytes: int | None = None
    other_bytes: int | None = None
    predicted: bool = False             # the memory figures are the replay's

    @property
    def open(self) -> bool:
        return self.why in _OPEN


def sequential(s: SettingResult, max_slowdown: float, max_rounds: int) -> Look:
    """The sequential test's decision on a setting's bracketed rounds (`summary.bracket_pairs`), looking from
    MIN_ROUNDS rounds on with `max_rounds` as the horizon. It takes every round: leaving out those the outlier
    rule flags (as the interval does from `stats.PAIRED_OUTLIER_MIN` on) makes the spread look smaller than it
    is, and in simulation raised each error from 5% to 7%; an outlying round widens the spread, which only makes
    the test slower to decide."""
    # as differences of logs: a ratio of extreme rates (1e308 over 5e-324) would overflow or round to 0
    return look([math.log(c) - math.log(b) for b, c in s.pairs if b > 0 and c > 0], max_slowdown, max_rounds,
                MIN_ROUNDS)


_DECIDED = {Outcome.ACCEPTED: Contention.CLEARED, Outcome.REFUSED: Contention.TOO_SLOW,
            Outcome.INCONCLUSIVE: Contention.INCONCLUSIVE, Outcome.CONTINUE: Contention.TOO_WIDE}


def backend_skip(native: Iterable[SettingResult], tie: float = DEFAULT_TIE) -> SettingResult | None:
    """The native candidate that makes a backend switch's trial needless, if one does: its peak reserved is within
    the tie of the program's peak requested bytes.

    Why that settles it: every allocator must back each live tensor with device memory, so whatever the driver's
    pool does, cudaMallocAsync holds at least the program's peak requested bytes (docs/ALLOCATOR.md: requested
    counts what the program asked for), and its device figure adds a context at least the native allocator's (on
    the H200 0.81-0.83 GiB beyond its pool, against at most 0.77 GiB beyond native reserved; results/). A native
    setting that reserves within the tie of those bytes therefore holds at most a tie more than the backend switch
    could, so the switch can at best tie, and a tie goes to the native allocator (`order.tie_rank`). Seen on the
    H200 too: in all seven committed sweeps with both, the pool held 3-13% more than the peak requested bytes."""
    return next((s for s in native if s.fits and not s.switches_backend and s.peak_reserved_bytes
                 and s.peak_requested_bytes and within(s.peak_reserved_bytes, s.peak_requested_bytes, tie)), None)


def standings(group: list[SettingResult], planned: list[AllocConf], max_slowdown: float, tie: float = DEFAULT_TIE,
              predicted: Mapping[str, SettingResult] | None = None, *, max_rounds: int) -> list[Standing]:
    """Each planned non-default setting of one group (one environment, backend and budget), in planned order.
    `group` holds what was measured so far (any order; settings not yet run may be missing); `predicted` the
    replay's result per setting, where there is one (a hybrid sweep's native settings); `max_rounds` the cap, the
    sequential test's horizon."""
    by_conf = {s.conf: s for s in group}
    base = by_conf.get("")
    named = {str(c): c for c in planned}
    # What each planned setting is known to need: measured, else predicted.
    views = {c: v for c in named if (v := by_conf.get(c) or (predicted or {}).get(c)) is not None}
    candidates = [v for c, v in views.items()
                  if v.fits and not _refused(v, by_conf.get(c), base, max_slowdown, max_rounds)]
    return [_standing(setting, by_conf.get(conf), views.get(conf), base, candidates, max_slowdown, max_rounds, tie)
            for conf, setting in named.items() if conf != ""]


def _refused(view: SettingResult, measured: SettingResult | None, base: SettingResult | None,
             max_slowdown: float, max_rounds: int) -> bool:
    """May not be recommended, on what is known so far (the default never is)."""
    if view.is_default:
        return False
    if base is not None and base.fits and _more_than(view, base):
        return True
    return (measured is not None and len(measured.trials) >= MIN_ROUNDS
            and sequential(measured, max_slowdown, max_rounds).outcome is Outcome.REFUSED)


def _more_than(view: SettingResult, base: SettingResult) -> bool:
    _, mine, default = view.compared_with(base)
    return mine > default


def _standing(setting: AllocConf, s: SettingResult | None, view: SettingResult | None, base: SettingResult | None,
              candidates: list[SettingResult], max_slowdown: float, max_rounds: int, tie: float) -> Standing:
    conf = str(setting)
    at = Standing(conf, Contention.NOT_MEASURED, len(s.trials) if s is not None else 0, view is not None,
                  predicted=s is None and view is not None)
    if view is not None and not view.fits:
        return replace(at, why=Contention.FAILED, state=view.state)
    if view is not None and base is not None and base.fits:
        measure, mine, default = view.compared_with(base)
        if mine > default:
            return replace(at, why=Contention.MORE_MEMORY, measure=measure, memory_bytes=mine, other_bytes=default)
    if view is not None:
        rival = next((t for t in by_preference(candidates, tie) if t.conf != conf and lower_beyond_tie(t, view, tie)),
                     None)
        if rival is not None:
            measure, mine, theirs = view.compared_with(rival)
            return replace(at, why=Contention.LOSES_ON_MEMORY, winner=rival.conf, measure=measure, memory_bytes=mine,
                           other_bytes=theirs)
    elif setting.is_async and (native := backend_skip(by_preference(candidates, tie), tie)):
        return replace(at, why=Contention.BACKEND_SKIPPED, winner=native.conf, memory_bytes=native.peak_reserved_bytes,
                       other_bytes=native.peak_requested_bytes, predicted=native.simulated)
    if s is None:
        return at
    if base is None or not base.fits:
        return replace(at, why=Contention.NO_BASELINE)
    c = s.vs_default
    if c is None:
        return replace(at, why=Contention.NO_THROUGHPUT)
    why = (Contention.TOO_FEW_ROUNDS if at.rounds < MIN_ROUNDS
           else _DECIDED[sequential(s, max_slowdown, max_rounds).outcome])
    return replace(at, why=why, half_width=c.half_width, ratio=c.ratio)


def contenders(group: list[SettingResult], planned: list[AllocConf], max_slowdown: float, tie: float = DEFAULT_TIE,
               predicted: Mapping[str, SettingResult] | None = None, *, max_rounds: int) -> list[str]:
    """The settings that the next round runs after its default: those in contention, lowest memory first (the
    preference's order), then those whose memory nobody knows yet, in planned order; [] when none is open.
    (The next round's default, or a closing run, follows them: `summary.bracket_pairs`.)"""
    open_ = {st.conf for st in standings(group, planned, max_slowdown, tie, predicted, max_rounds=max_rounds)
             if st.open}
    by_conf, names = {s.conf: s for s in group}, [str(c) for c in planned]
    views = [v for c in names if c in open_ and (v := by_conf.get(c) or (predicted or {}).get(c)) is not None]
    known = [v.conf for v in by_preference(views, tie)]
    return known + [c for c in names if c in open_ and c not in known]


def trials_to_come(standings: list[Standing], goal: float, rounds_left: int) -> int:
    """About how many trials the rounds still run, from the standings after a round's default ran: the open
    settings' trials (one to learn a memory nobody knows; a leader MIN_ROUNDS of its own; one not decided yet,
    the rounds its spread implies, `stats.rounds_needed`, for an interval around the ratio measured so far to
    leave 1 - goal out, or to be ±goal where no ratio is known), each capped at `rounds_left` (this round
    included), and one default run per round after this one plus the closing one. Where no open setting's
    memory is known, one of those measured for it is taken to lead."""
    per: list[int] = []
    unknown = 0
    for st in standings:
        if not st.open:
            continue
        if st.why is Contention.NOT_MEASURED and not st.memory_known:
            unknown += 1
            continue
        need = MIN_ROUNDS - st.rounds
        if st.why is Contention.TOO_WIDE and st.half_width is not None:
            from .stats import rounds_needed   # scipy: not at the CLI's start-up

            need = rounds_needed(st.half_width, st.rounds, _settling(st.ratio, goal) or goal,
                                 most=st.rounds + rounds_left) - st.rounds
        per.append(max(1, min(need, rounds_left)))
    if unknown and not per:
        per.append(max(1, min(MIN_ROUNDS, rounds_left)))
        unknown -= 1
    rounds = max(per, default=1 if unknown else 0)
    return sum(per) + unknown + rounds


def over_time_budget(budget_s: float | None, spent_s: float, rounds_done: int, walls: list[float], trials: int,
                     slots: int) -> bool:
    """Whether the next round would run past the time budget: the time spent so far and the round's `trials` (its
    settings and the default's run that closes it), `slots` at once, each as long as the mean of the `walls` (wall
    seconds of the trials measured so far; none: no estimate). The first round always runs."""
    if budget_s is None or rounds_done == 0:
        return False
    estimate = (sum(walls) / len(walls)) * trials / slots if walls else 0.0
    return spent_s + estimate > budget_s


def _settling(ratio: float | None, goal: float) -> float:
    """The half-width at which an interval around `ratio` leaves 1 - goal out: its distance from 1 - goal, on
    the log scale the intervals are built on (0 when not known)."""
    return math.expm1(abs(math.log(ratio) - math.log1p(-goal))) if ratio else 0.0
