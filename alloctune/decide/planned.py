"""What a sweep planned, read back from sweep.json: how many trials each decision should rest on, so that a
decision taken from an interrupted sweep (`alloctune report`) says it is incomplete instead of passing for final."""
from __future__ import annotations

from ..results.folder import SweepInfo
from ..results.records import Backend, TrialRecord, measured_env_id


def _runs(info: SweepInfo, conf: str, env_ids: tuple[str, ...]) -> bool:
    return all(info.skipped_as(conf, e) is None for e in env_ids)


def planned_trials(info: SweepInfo, env_id: str, backend: str) -> int | None:
    """Trials the sweep meant to record for one decision group (environment, backend): the grid less what it
    skipped there, times the repeats (one for a replay). None where sweep.json cannot tell: `--repeats auto` stops
    rounds once the answer is known, a search picks its own settings, and a hybrid sweep's GPU finalists depend on
    a count it does not record."""
    if info.search is not None or (backend != Backend.SIM and (info.auto_repeats or info.backend == Backend.HYBRID)):
        return None
    if backend == Backend.SIM:
        plain = measured_env_id(env_id)   # the rules skip under the plain id, replay failures under sim:
        return sum(_runs(info, c, (plain, env_id)) for c in info.grid)
    return sum(_runs(info, c, (env_id,)) for c in info.grid) * info.repeats


def recorded_trials(records: list[TrialRecord], env_id: str, backend: str) -> int:
    """Distinct trials recorded for the group: a trial recorded twice counts once, and so does a hybrid sweep's
    recording trial, the default's repeat 0 (beside an unrecorded repeat 0 in a folder from before it counted);
    an extra trial (a command's recording) is none of them."""
    return len({(r.conf, r.repeat) for r in records if r.env_id == env_id and r.backend == backend
                and not r.extra})
