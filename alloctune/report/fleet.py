"""`alloctune fleet`'s output: the settings ranked by what they cost the jobs (decide/fleet.py), the one that loses
least, and what each job gives up under it."""
from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from rich.text import Text

from ..decide.fleet import SettingLoss
from ..settings.conf import AllocConf
from ..settings.grid import Skip
from ..results.provenance import Provenance
from ..results.vocabulary import BASIS, FITS, PEAK_RESERVED, SETTING, SIMULATED_TORCH, Basis, setting_name
from ..sim.target import simulated_torch
from .layout import say
from .provenance import origin, title, workspace_warning
from .tables import figures_table, print_numbered, whole_settings


def _loss(value: float | None) -> str:
    """+7.2%, +417%: a tenth of a percent where it is small, whole percents from 100% (columns stay narrow)."""
    if value is None:
        return "-"
    return f"+{100 * value:.0f}%" if value >= 1 else f"+{100 * value:.1f}%"


class Fleet(Protocol):
    """What a fleet's ranking holds (api/fleet.FleetResult)."""

    @property
    def jobs(self) -> tuple[str, ...]: ...
    @property
    def ranked(self) -> tuple[SettingLoss, ...]: ...
    @property
    def not_simulated(self) -> Mapping[AllocConf, str]: ...
    @property
    def origins(self) -> tuple[Provenance, ...]: ...
    @property
    def skipped(self) -> tuple[Skip, ...]: ...
    @property
    def torch_versions(self) -> tuple[str | None, ...]: ...
    @property
    def best(self) -> SettingLoss | None: ...
    @property
    def left_out(self) -> tuple[str, ...]: ...
    @property
    def warnings(self) -> tuple[str, ...]: ...


def fleet_json(fleet: Fleet) -> dict:
    """The ranking as --json prints it: the setting that loses least (null: none runs every job, or no setting
    runs any), the settings in order with each job's peak (replayed) and loss under each, the jobs no setting runs
    (left out), the settings not simulated and those skipped, each with why, and each job's trace's origin
    (`dry_run`: null for a recording made on a GPU) and the torch its replay followed."""
    settings = [{SETTING: setting_name(str(s.setting)), "label": s.setting.label, "worst": s.worst, "mean": s.mean,
                 "failed": list(s.failed),
                 "jobs": [{"job": j.job, BASIS: Basis.REPLAYED.value, FITS: j.peak_bytes is not None,
                           PEAK_RESERVED: j.peak_bytes, "loss": j.loss, "best": setting_name(j.best),
                           "best_bytes": j.best_bytes} for j in s.jobs]} for s in fleet.ranked]
    return {"best": setting_name(str(fleet.best.setting)) if fleet.best else None, "settings": settings,
            "left_out": list(fleet.left_out),
            "not_simulated": [{SETTING: setting_name(str(s)), "reason": why} for s, why in fleet.not_simulated.items()],
            "skipped": [skip.to_json() for skip in fleet.skipped], "warnings": list(fleet.warnings),
            "jobs": [{"job": job, "dry_run": p.to_json(), SIMULATED_TORCH: simulated_torch(torch)}
                     for job, p, torch in zip(fleet.jobs, fleet.origins, fleet.torch_versions)]}


def print_fleet(console, fleet: Fleet) -> None:
    ranked, origins = list(fleet.ranked), dict(zip(fleet.jobs, fleet.origins))
    for warning in fleet.warnings:
        say(console, Text.assemble(("warning:", "yellow"), " ", warning))
    jobs = [j.job for j in ranked[0].jobs] if ranked else []
    if jobs:
        rows = [[_loss(s.worst), _loss(s.mean), str(len(s.failed)),
                 *(_loss(j.loss) if j.loss is not None else "fails" for j in s.jobs)] for s in ranked]
        headers = ["setting", "worst", "mean", "fails", *(f"job\n{n}" for n in range(1, len(jobs) + 1))]

        def make(labels: list[str]):
            return figures_table(headers, [[label, *row] for label, row in zip(labels, rows)], setting=0,
                                 title=title(origins.values(), "Peak reserved above each job's own best, per setting"),
                                 caption="fails: the setting has an OOM or an alloc retry on the job's card")

        print_numbered(console, *whole_settings(make, [s.setting.label for s in ranked], console.width))
    for n, job in enumerate(jobs, 1):
        _job(console, f"job {n}: {job}", origins.get(job, Provenance()))
    for job in fleet.left_out:
        _job(console, f"left out: {job}, which no setting runs on its card (an OOM or an alloc retry under each)",
             origins.get(job, Provenance()))
    _not_ranked(console, fleet.not_simulated, fleet.skipped)
    _verdict(console, fleet, len(jobs))


def _job(console, line: str, source: Provenance) -> None:
    say(console, line + ("" if source.measured else f", {origin(source)}"))
    if unsized := workspace_warning(source):
        say(console, f"  warning: {unsized}")


def _not_ranked(console, not_simulated: Mapping[AllocConf, str], skipped: Sequence[Skip]) -> None:
    for setting, why in not_simulated.items():
        say(console, f"not simulated {setting.label}: {why}")
    for skip in skipped:
        say(console, f"skipped {skip.setting.label}: {skip.reason}")


def _verdict(console, fleet: Fleet, ranked_jobs: int) -> None:
    best = fleet.best
    if best is None:
        say(console, "No setting runs any job." if not ranked_jobs else "No setting runs every job.")
        return
    say(console, f"Least loss across the {ranked_jobs} job{'s' if ranked_jobs != 1 else ''}: {best.setting.label} "
                 f"(worst {_loss(best.worst)}, mean {_loss(best.mean)}). What each job gives up under it:")
    for j in best.jobs:
        gives = "nothing: it is its best" if j.peak_bytes == j.best_bytes else f"{_loss(j.loss)} against {j.best}"
        say(console, f"  {j.job}: {gives}")
