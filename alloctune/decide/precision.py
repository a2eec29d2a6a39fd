"""How precise a choice's throughput comparison got: the smallest slowdown the sweep could detect and, when that
missed the goal (±max_slowdown, what `--repeats auto` aims for), why the rounds stopped and about how many would
have reached it. A reason (`reasons.py`); `report/words.py` says it.
"""
from __future__ import annotations

from ..results.alternation import AlternationEnd
from .choice import Choice
from .inprocess import alternations
from .reasons import Code, Reason
from .quoted import Precision, Stop
from .rounds import sequential
from .sequential import Outcome
from .stats import rounds_needed


def precision(choice: Choice, *, auto: bool, max_repeats: int) -> Reason | None:
    """For a measured group with a throughput comparison (else None): the winner's comparison, or when the default
    won the settings compared with it. `auto` and `max_repeats` are what the sweep asked (sweep.json)."""
    if choice.simulated or not choice.compared:
        return None
    best = choice.best
    shown = [best] if best is not None and not best.is_default and best.vs_default is not None else choice.compared
    compared = [s for s in shown if s.vs_default is not None]
    rounds = max((c.pairs or len(s.trials) for s in shown if (c := s.vs_default) is not None), default=0)
    # only rounds settle (the sequential test's boundaries cost a simulation the first time they are asked for)
    settled = auto and bool(compared) and all(sequential(s, choice.max_slowdown, max_repeats).outcome
                                              in (Outcome.ACCEPTED, Outcome.REFUSED) for s in compared)
    ends = [a.end for s in shown for a in alternations(s.trials)]
    return precision_of(choice.detectable, rounds, choice.max_slowdown, auto=auto, max_repeats=max_repeats,
                        settled=settled, alternation_end=ends[0] if ends else None)


def precision_of(detectable: float | None, rounds: int, goal: float, *, auto: bool, max_repeats: int,
                 settled: bool = False, alternation_end: AlternationEnd | None = None) -> Reason:
    """`detectable`: the interval's half-width (None: no interval); `rounds` it rests on (pairs of blocks, where
    the comparison was timed in one process); `settled`: the comparisons shown answer the max-slowdown question
    already (accepted or refused, `rounds.sequential`), which ends rounds early; `alternation_end`: why the blocks
    of an in-process comparison stopped."""
    if detectable is None:
        return Reason(Code.PRECISION_UNKNOWN)
    if detectable <= goal:
        return Reason(Code.PRECISION_REACHED, Precision(detectable, rounds, goal))
    # an in-process comparison's blocks stopped for the reason they give (Stop names each AlternationEnd)
    stop = (Stop(alternation_end.value) if alternation_end is not None else Stop.FIXED_REPEATS if not auto
            else Stop.SETTLED if settled else Stop.MAX_REPEATS if rounds >= max_repeats else Stop.TIME_BUDGET)
    needed = rounds_needed(detectable, rounds, goal) if rounds >= 2 else None
    return Reason(Code.PRECISION_SHORT, Precision(detectable, rounds, goal, stop, max_repeats, needed))
