"""What a sweep planned, read back from sweep.json: how many trials each decision should rest on, so that a
decision taken from an interrupted sweep (`alloctune report`) says it is incomplete instead of passing for final."""
from __future__ import annotations

from .conf import AllocConf
from .records import TrialRecord
from .results import SweepInfo

SIM = "sim"


def _runs(info: SweepInfo, conf: str, env_ids: tuple[str, ...]) -> bool:
    return not any(info.skip_reason(conf, e) for e in env_ids)


def planned_trials(info: SweepInfo, records: list[TrialRecord], env_id: str, backend: str) -> int:
    """Trials the sweep meant to record for one decision group (environment, backend): the grid less what it
    skipped there, times the repeats (one for a replay). A hybrid sweep measures on the GPU only its finalists,
    which follow from the simulated records, as they did during the sweep."""
    if backend == SIM:
        plain = env_id.removeprefix("sim:")   # the rules skip under the plain id, replay failures under sim:
        return sum(_runs(info, c, (plain, env_id)) for c in info.grid)
    if info.auto_repeats:
        # Rounds go on until the answers are known, so their number is not planned; a sweep that finished closed
        # its last round with a run of the default, whose last repeat then follows every other setting's.
        group = [r for r in records if r.env_id == env_id and r.backend == backend]
        last_default = max((r.repeat for r in group if r.conf == ""), default=-1)
        last_other = max((r.repeat for r in group if r.conf != ""), default=-1)
        recorded = recorded_trials(records, env_id, backend)
        return recorded if last_default > last_other else recorded + 1
    confs = [c for c in info.grid if _runs(info, c, (env_id,))]
    if info.backend == "hybrid":
        from .hybrid import finalists

        sim = [r for r in records if r.backend == SIM]
        confs = [str(c) for c in finalists(sim, {env_id: [AllocConf.parse(c) for c in confs]},
                                           info.max_slowdown)[env_id]]
    return len(confs) * info.repeats


def recorded_trials(records: list[TrialRecord], env_id: str, backend: str) -> int:
    """Distinct trials recorded for the group (a trial recorded twice counts once)."""
    return len({(r.conf, r.repeat) for r in records if r.env_id == env_id and r.backend == backend})
