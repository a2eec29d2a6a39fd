"""A hybrid sweep's finalists (fixed or `auto` repeats): which of the settings it replayed go on to the GPU. Pure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..results.records import Backend, TrialRecord, measured_env_id
from ..results.vocabulary import setting_name
from ..settings.conf import AllocConf
from .estimate import Asked, first_estimate
from .order import by_preference, preferred
from .parameters import DEFAULT_TIE
from .summary import SettingResult, summarize_settings


def finalists(records: list[TrialRecord], planned: Mapping[str, list[AllocConf]], max_slowdown: float, count: int,
              tie: float = DEFAULT_TIE) -> dict[str, list[AllocConf]]:
    """Per environment, the settings of `planned` to measure: the default plus the `count` best simulated settings
    (and what replay cannot judge, cudaMallocAsync, when it is in the grid). Best as the sweep's choice prefers them
    (`order.by_preference`): the one the choice would take first, so measuring it is what counts, then the one it
    would take without it, ..."""
    return _finalists(_replayed(records, max_slowdown), planned, count, tie)


def _replayed(records: list[TrialRecord], max_slowdown: float) -> list[SettingResult]:
    """The replays of `records`, summarised per setting."""
    return summarize_settings([r for r in records if r.backend == Backend.SIM], max_slowdown)


def _finalists(replayed: list[SettingResult], planned: Mapping[str, list[AllocConf]], count: int,
               tie: float = DEFAULT_TIE) -> dict[str, list[AllocConf]]:
    """`finalists`, from the replays' summaries."""
    keep = {""}
    for s in by_preference([s for s in replayed if s.conf], tie):
        if len(keep) > count or not s.fits:
            break
        keep.add(s.conf)
    return {env_id: [c for c in confs if str(c) in keep or c.is_async] for env_id, confs in planned.items()}


@dataclass(frozen=True)
class GpuPlan:
    """What a hybrid sweep would run on the GPU after the replays a sweep made without one (`sweep --dry-run`): per
    environment (its measured id), the settings it would measure, the default ('') first, and about how many GPU
    trials in all."""

    measured: dict[str, list[str]]
    trials: int

    def to_json(self) -> dict:
        return {"measured": {env: [setting_name(c) for c in confs] for env, confs in self.measured.items()},
                "trials": self.trials}


def gpu_plan(records: list[TrialRecord], max_slowdown: float, asked: Asked) -> GpuPlan:
    """The plan a hybrid sweep asked as `asked` would run on the GPU, from the replays in `records`: the default and
    its finalists (with --repeats confirm, the one it would confirm: the one the replays prefer, none where that is
    the default), counted by `first_estimate` as `asked` (after the replays: a search's settings are among them)."""
    planned: dict[str, list[AllocConf]] = {}
    for r in records:
        if r.backend == Backend.SIM and r.setting not in planned.setdefault(measured_env_id(r.env_id), []):
            planned[measured_env_id(r.env_id)].append(r.setting)
    replayed = _replayed(records, max_slowdown)
    chosen = _finalists(replayed, planned, 1 if asked.confirm else asked.finalists)
    if asked.confirm and _default_preferred(replayed):
        # confirm measures the preferred setting beside the default (confirm.plan_speed's winner): none where that
        # is the default, which wins every tie (a setting that replays as the default does shows the GPU nothing)
        chosen = {env: [c for c in confs if c.is_default or c.is_async] for env, confs in chosen.items()}
    return GpuPlan({env: [str(c) for c in sorted(confs, key=lambda c: not c.is_default)] for env, confs in
                    chosen.items()}, first_estimate(chosen.values(), asked))


def _default_preferred(replayed: list[SettingResult]) -> bool:
    """The replays prefer the default to every native setting (within the tie it wins: it has fewest keys)."""
    first = preferred(s for s in replayed if not s.switches_backend)
    return first is None or first.is_default
