"""`alloctune fleet`'s output: the settings ranked by what they cost the jobs (decide/fleet.py), the one that loses
least, and what each job gives up under it."""
from __future__ import annotations

from typing import Mapping

from ..decide.fleet import SettingLoss
from ..settings.conf import AllocConf
from ..results.provenance import Provenance
from .layout import say
from .provenance import origin, title, workspace_warning
from .tables import figures_table, print_numbered, whole_settings


def _loss(value: float | None) -> str:
    """+7.2%, +417%: a tenth of a percent where it is small, whole percents from 100% (columns stay narrow)."""
    if value is None:
        return "-"
    return f"+{100 * value:.0f}%" if value >= 1 else f"+{100 * value:.1f}%"


def fleet_json(ranked: list[SettingLoss], not_simulated: Mapping[AllocConf, str],
               origins: Mapping[str, Provenance]) -> dict:
    """The ranking as --json prints it: the setting that loses least (null: none runs every job), the settings in
    order with each job's peak and loss under each, the settings not simulated with why, and each job's trace's
    origin (`dry_run`: null for a recording made on a GPU)."""
    settings = [{"conf": str(s.setting), "label": s.setting.label, "worst": s.worst, "mean": s.mean,
                 "failed": list(s.failed),
                 "jobs": [{"job": j.job, "peak_reserved_bytes": j.peak_bytes, "loss": j.loss, "best": j.best,
                           "best_bytes": j.best_bytes} for j in s.jobs]} for s in ranked]
    return {"best": settings[0]["conf"] if settings and not ranked[0].failed else None, "settings": settings,
            "not_simulated": [{"conf": str(s), "reason": why} for s, why in not_simulated.items()],
            "jobs": [{"job": job, "dry_run": p.to_json()} for job, p in origins.items()]}


def print_fleet(console, ranked: list[SettingLoss], not_simulated: Mapping[AllocConf, str],
                origins: Mapping[str, Provenance]) -> None:
    jobs = [j.job for j in ranked[0].jobs] if ranked else []
    rows = [[_loss(s.worst), _loss(s.mean), str(len(s.failed)),
             *(_loss(j.loss) if j.loss is not None else "fails" for j in s.jobs)] for s in ranked]
    headers = ["setting", "worst", "mean", "fails", *(f"job\n{n}" for n in range(1, len(jobs) + 1))]

    def make(labels: list[str]):
        return figures_table(headers, [[label, *row] for label, row in zip(labels, rows)], setting=0,
                             title=title(origins.values(), "Peak reserved above each job's own best, per setting"),
                             caption="fails: the setting has an OOM or an alloc retry on the job's card")

    print_numbered(console, *whole_settings(make, [s.setting.label for s in ranked], console.width))
    for n, job in enumerate(jobs, 1):
        source = origins.get(job, Provenance())
        say(console, f"job {n}: {job}" + ("" if source.measured else f", {origin(source)}"))
        if unsized := workspace_warning(source):
            say(console, f"  warning: {unsized}")
    for setting, why in not_simulated.items():
        say(console, f"not simulated {setting.label}: {why}")
    if not ranked or ranked[0].failed:
        say(console, "No setting runs every job.")
        return
    best = ranked[0]
    say(console, f"Least loss across the {len(jobs)} jobs: {best.setting.label} (worst {_loss(best.worst)}, "
                 f"mean {_loss(best.mean)}). What each job gives up under it:")
    for j in best.jobs:
        gives = "nothing: it is its best" if j.peak_bytes == j.best_bytes else f"{_loss(j.loss)} against {j.best}"
        say(console, f"  {j.job}: {gives}")
