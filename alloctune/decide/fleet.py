"""One setting for many jobs: how far each setting leaves each job from its own best, and the setting that loses
least across them all. Figures only, no words.

A job's loss under a setting is its peak reserved there relative to the lowest any setting that fits it gave it
(0.25: a quarter more memory than its best). A setting fits a job as a replay fits (sim/replay.ReplayOutcome.fits:
no OOM); one that does not loses it outright, and one that fits it only with alloc retries (each frees the cache
and synchronises the device) fits it, with its retries said. The settings are ranked by the jobs they do not fit
(fewest first), then by the jobs they fit only with retries, then by their worst loss over the jobs they fit, then
by their mean loss, then by fewer keys (the default has none) and by name: the first is the one that loses least.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Mapping

from ..settings.conf import AllocConf


@dataclass(frozen=True)
class JobLoss:
    """One job under one setting: its peak reserved there (None: it does not fit), its alloc retries where it fits,
    and its own best."""

    job: str
    peak_bytes: int | None
    best: str              # the label of the job's own best setting
    best_bytes: int
    retries: int = 0

    @property
    def loss(self) -> float | None:
        """Peak reserved relative to the job's best, minus 1; None where the setting does not fit the job."""
        return None if self.peak_bytes is None else self.peak_bytes / self.best_bytes - 1


@dataclass(frozen=True)
class SettingLoss:
    """One setting across the jobs."""

    setting: AllocConf
    jobs: tuple[JobLoss, ...]

    @property
    def conf(self) -> str:
        """The setting as tables and JSON show it ('default' for the default), as `JobLoss.best` names one."""
        return self.setting.label

    @property
    def failed(self) -> tuple[str, ...]:
        """The jobs it does not fit."""
        return tuple(j.job for j in self.jobs if j.loss is None)

    @property
    def retried(self) -> tuple[str, ...]:
        """The jobs it fits only with alloc retries."""
        return tuple(j.job for j in self.jobs if j.loss is not None and j.retries)

    @property
    def worst(self) -> float | None:
        """The largest loss over the jobs it fits (None: it fits none)."""
        losses = [j.loss for j in self.jobs if j.loss is not None]
        return max(losses) if losses else None

    @property
    def mean(self) -> float | None:
        losses = [j.loss for j in self.jobs if j.loss is not None]
        return fmean(losses) if losses else None

    def rank(self) -> tuple:
        worst, mean = self.worst, self.mean
        return (len(self.failed), len(self.retried), float("inf") if worst is None else worst,
                float("inf") if mean is None else mean, self.setting.complexity, self.setting.label)


def rank_fleet(peaks: Mapping[str, Mapping[AllocConf, int | None]],
               retries: Mapping[str, Mapping[AllocConf, int]] | None = None) -> list[SettingLoss]:
    """The settings from least loss to most (the module's order), given each job's peak reserved per setting (None:
    the setting does not fit it) and its alloc retries where it fits (none given: none). A job that no setting fits
    is left out: it has no best to lose against; every job must have a figure (or None) for every setting."""
    settings = list(dict.fromkeys(s for per_job in peaks.values() for s in per_job))
    if any(set(per_job) != set(settings) for per_job in peaks.values()):
        raise ValueError("every job needs a figure (or None) for every setting")
    bests = {job: min(((b, s.complexity, s.label) for s, b in per_job.items() if b is not None), default=None)
             for job, per_job in peaks.items()}
    retried = retries or {}
    losses = [SettingLoss(s, tuple(JobLoss(job, peaks[job][s], best[2], best[0], retried.get(job, {}).get(s, 0))
                                   for job, best in bests.items() if best is not None))
              for s in settings]
    return sorted(losses, key=SettingLoss.rank)
