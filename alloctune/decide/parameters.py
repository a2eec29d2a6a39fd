"""The decision's two parameters and their defaults, once: the max slowdown (how much significantly slower than
the default a setting may be and still be recommended) and the tie margin (peaks within it tie). sweep.json and
choice.json record the values a decision used; a file from before they were kept holds none and meant these.
Beside them, the one noise figure a single confirmation pair is judged against (`PROCESS_NOISE`)."""
from __future__ import annotations

import math

from ..errors import OptionError

DEFAULT_MAX_SLOWDOWN = 0.02   # a setting significantly slower than the default by more than this is refused
DEFAULT_TIE = 0.01            # peaks within this fraction of each other tie

# How far one fresh process's throughput moves from its setting's own: about ±6% between processes of one setting
# on the H200 (torch 2.11; decide/stats.py, docs/evidence.md; steady passes of one job moved 0.2-5%, a variable-shape
# job up to 45% max/min), outliers about 20% low. A confirmation pair (the default, then the winner) is the ratio of
# two such processes, so its log ratio spreads sqrt(2) times as much, and only a difference beyond about two of those
# spreads (±17%) stands out of one pair's noise.
PROCESS_NOISE = 0.06
PAIR_DETECTABLE = 2 * math.sqrt(2) * PROCESS_NOISE


def max_slowdown_of(asked: float | None, recorded: float | None = None) -> float:
    """The max slowdown a decision applies: the one asked now (`report --max-slowdown`), else the one the sweep
    recorded, else (a folder from before it was recorded) the default."""
    if asked is not None:
        return asked
    return DEFAULT_MAX_SLOWDOWN if recorded is None else recorded


def check_max_slowdown(value: object) -> None:
    """A max slowdown is a fraction in [0, 1): else an OptionError naming the option (`sweep()`, `analyze()`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:   # NaN fails too
        raise OptionError("max_slowdown", "{max_slowdown} must be a fraction in [0, 1) such as 0.02, got {got!r}",
                          got=value)
