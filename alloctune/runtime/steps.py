"""`alloctune.step(units=1)`: mark the end of one step of your own script, so that `alloctune sweep -- CMD`
measures units per second over the steps after the warm-up instead of the whole run's wall time.

Standard library only and cheap: outside an alloctune trial (ALLOCTUNE_HOOK_OUT unset) it does nothing. In a
trial each mark is (time.perf_counter(), units) kept in memory; the start-up hook counts marks as they come (its
--steps window follows them: `listen`) and writes them with the process's peaks at exit (`hook/sitecustomize.py`).
Times are host times: with CUDA's asynchronous launches a single step's time is not its GPU time, but over many
steps the queue is bounded, so the rate over the window converges.
"""
from __future__ import annotations

import math
import os
import time

TYPE_CHECKING = False   # typing is not imported for a mark
if TYPE_CHECKING:
    from typing import Callable

_ACTIVE = bool(os.environ.get("ALLOCTUNE_HOOK_OUT"))
_MARKS: list[tuple[float, float]] = []
_LISTENERS: list[Callable[[], None]] = []


def step(units: float = 1) -> None:
    """Mark that the process finished one step that did `units` of work (samples, tokens, images...): a finite
    number of at least 0, checked in a trial or not, so that a script learns of a wrong one before it is swept."""
    if isinstance(units, bool) or not isinstance(units, (int, float)) or not 0 <= units < math.inf:   # NaN fails
        from ..errors import AlloctuneError, shown   # on a mistake only: a mark loads nothing more

        raise AlloctuneError(f"alloctune.step: units must be a finite number of at least 0, got {shown(units)}")
    if _ACTIVE:
        _MARKS.append((time.perf_counter(), float(units)))
        for listener in _LISTENERS:
            listener()


def listen(listener: Callable[[], None]) -> None:
    """Call `listener()` after each mark (the start-up hook's step counter)."""
    _LISTENERS.append(listener)


def marks() -> list[tuple[float, float]]:
    return list(_MARKS)
