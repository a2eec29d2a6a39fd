"""A hybrid sweep's finalists (fixed or `auto` repeats): which of the settings it replayed go on to the GPU. Pure."""
from __future__ import annotations

from typing import Mapping

from ..results.records import Backend, TrialRecord
from ..settings.conf import AllocConf
from .order import by_preference
from .parameters import DEFAULT_TIE
from .summary import summarize_settings


def finalists(records: list[TrialRecord], planned: Mapping[str, list[AllocConf]], max_slowdown: float, count: int,
              tie: float = DEFAULT_TIE) -> dict[str, list[AllocConf]]:
    """Per environment, the settings of `planned` to measure: the default plus the `count` best simulated settings
    (and what replay cannot judge, cudaMallocAsync, when it is in the grid). Best as the sweep's choice prefers them
    (`order.by_preference`): the one the choice would take first, so measuring it is what counts, then the one it
    would take without it, ..."""
    simulated = [s for s in summarize_settings([r for r in records if r.backend == Backend.SIM], max_slowdown)
                 if s.conf]
    keep = {""}
    for s in by_preference(simulated, tie):
        if len(keep) > count or not s.fits:
            break
        keep.add(s.conf)
    return {env_id: [c for c in confs if str(c) in keep or c.is_async] for env_id, confs in planned.items()}
