"""`alloctune fleet`'s output: the settings ranked by what they cost the jobs (decide/fleet.py), the one that loses
least, and what each job gives up under it."""
from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from rich.text import Text

from ..decide.fleet import JobLoss, SettingLoss
from ..settings.conf import AllocConf
from ..settings.grid import Skip
from ..results.provenance import Provenance
from ..results.vocabulary import BASIS, FITS, PEAK_RESERVED, SETTING, SIMULATED_TORCH, Basis, setting_name
from ..sim.target import simulated_torch, simulated_with
from ..units import plural
from .layout import say
from .provenance import origin, title
from .tables import figures_table, print_numbered, whole_settings


OOM = "OOM"   # a job's cell, and the worst case, where the setting does not fit a job
CAPTION = (f"{OOM}: the setting does not fit the job on its card, and that is its worst case; retry: the jobs it "
           f"fits only with alloc retries (each frees the cache and synchronises the device)")


def _loss(value: float | None) -> str:
    """+7.2%, +417%: a tenth of a percent where it is small, whole percents from 100% (columns stay narrow)."""
    if value is None:
        return "-"
    return f"+{100 * value:.0f}%" if value >= 1 else f"+{100 * value:.1f}%"


def _retries(count: int) -> str:
    return plural(count, "alloc retry", "alloc retries")


def _job_cell(j: JobLoss) -> str:
    """A job under a setting: its loss, with its retries where it needs some; OOM where it does not fit."""
    if j.loss is None:
        return OOM
    return _loss(j.loss) + (f" ({plural(j.retries, 'retry', 'retries')})" if j.retries else "")


def _worst(s: SettingLoss) -> str:
    """The worst case: an OOM where the setting does not fit some job, never the worst of the jobs it fits."""
    return OOM if s.failed else _loss(s.worst)


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
    """The ranking as --json prints it: the setting that loses least (null: none fits every job, or no setting
    fits any), the settings in order with each job's peak (replayed) and loss under each, the jobs no setting fits
    (left out), the settings not simulated and those skipped, each with why, the warnings (each job's as replay
    gives them, said of the job; one where the jobs' torches differ), and each job's trace's origin (`dry_run`:
    null for a recording made on a GPU) and the torch its replay followed. A setting's `failed`: the
    jobs it does not fit; `retried`: those it fits only with alloc retries; `worst` and `mean`: over the jobs it
    fits."""
    settings = [{SETTING: s.conf, "label": s.setting.label, "worst": s.worst, "mean": s.mean,
                 "failed": list(s.failed),
                 "retried": list(s.retried),
                 "jobs": [{"job": j.job, BASIS: Basis.REPLAYED.value, FITS: j.peak_bytes is not None,
                           PEAK_RESERVED: j.peak_bytes, "num_alloc_retries": j.retries, "loss": j.loss,
                           "best": setting_name(j.best), "best_bytes": j.best_bytes} for j in s.jobs]}
                for s in fleet.ranked]
    return {"best": fleet.best.conf if fleet.best else None, "settings": settings,
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
        rows = [[_worst(s), "-" if s.failed else _loss(s.mean), str(len(s.failed)), str(len(s.retried)),
                 *map(_job_cell, s.jobs)] for s in ranked]
        headers = ["setting", "worst", "mean", OOM, "retry", *(f"job\n{n}" for n in range(1, len(jobs) + 1))]
        keep = [j for j in range(len(headers)) if headers[j] != "retry" or any(s.retried for s in ranked)]

        def make(labels: list[str]):
            return figures_table([headers[j] for j in keep],
                                 [[[label, *row][j] for j in keep] for label, row in zip(labels, rows)], setting=0,
                                 title=title(origins.values(), "Peak reserved above each job's own best, per setting"),
                                 caption=CAPTION)

        print_numbered(console, *whole_settings(make, [s.setting.label for s in ranked], console.width))
    torches = dict(zip(fleet.jobs, fleet.torch_versions))
    for n, job in enumerate(jobs, 1):
        _job(console, f"job {n}: {job}", origins.get(job, Provenance()), torches.get(job))
    for job in fleet.left_out:
        _job(console, f"left out: {job}, which no setting fits on its card (an OOM under each)",
             origins.get(job, Provenance()), torches.get(job))
    _not_ranked(console, fleet.not_simulated, fleet.skipped)
    _verdict(console, fleet, len(jobs))


def _job(console, line: str, source: Provenance, torch: str | None) -> None:
    """A job's line: its trace's name, the torch its replays followed (as replay's header states it), and where the
    trace comes from when it is not a GPU's recording (what a dry run could not size is among the warnings)."""
    say(console, f"{line}, {simulated_with(torch)}" + ("" if source.measured else f", {origin(source)}"))


def _not_ranked(console, not_simulated: Mapping[AllocConf, str], skipped: Sequence[Skip]) -> None:
    for setting, why in not_simulated.items():
        say(console, f"not simulated {setting.label}: {why}")
    for skip in skipped:
        say(console, skip.said)


def _verdict(console, fleet: Fleet, ranked_jobs: int) -> None:
    best = fleet.best
    if best is None:
        say(console, "No setting fits any job." if not ranked_jobs else "No setting fits every job.")
        return
    say(console, f"Least loss across the {ranked_jobs} job{'s' if ranked_jobs != 1 else ''}: {best.setting.label} "
                 f"(worst {_loss(best.worst)}, mean {_loss(best.mean)}). What each job gives up under it:")
    for j in best.jobs:
        gives = "nothing: it is its best" if j.peak_bytes == j.best_bytes else f"{_loss(j.loss)} against {j.best}"
        say(console, f"  {j.job}: {gives}" + (f"; it fits, with {_retries(j.retries)}" if j.retries else ""))
