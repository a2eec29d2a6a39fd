"""The order of settings by the memory they showed, with no margin (`by_memory`): those that fit first, the lowest
peak reserved first, among equal figures the simpler (`simpler`: fewer keys, then by name); a setting without
figures (not simulated) last.

The rule every ordering of settings builds on, here because sim/ and decide/ both need it and sit side by side on
results/: the replay's ranking (`sim/replay.ReplayOutcome.sort_key`, which diagnose's replays use too), the
search's (`sim/search.Candidate.rank`: retries before keys, on purpose), the maximum over a job's traces
(`decide/maximum.py`) and the choice's preference (`decide/order.py`: a tie margin, the backend and repeats on top;
with no margin, on figures of one backend that repeat exactly, it orders as `by_memory` does).
"""
from __future__ import annotations

from ..settings.conf import AllocConf


def simpler(setting: AllocConf) -> tuple[int, str]:
    """Among settings equal on what was compared: fewer keys first (the default has none), then by name."""
    return setting.complexity, setting.label


def by_memory(setting: AllocConf, fits: bool | None, peak_reserved_bytes: int) -> tuple:
    """The sort key of a setting that fit or not (None: no figures) with that peak reserved."""
    if fits is None:
        return (2, 0, *simpler(setting))
    return (0 if fits else 1, peak_reserved_bytes, *simpler(setting))
