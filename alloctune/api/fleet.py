"""fleet: one setting for many jobs, from their traces: every setting replayed on each job (on its recording GPU's
memory, or one given), ranked by how far each leaves each job from its own best (decide/fleet.py), and the one that
loses least. `alloctune fleet` and `alloctune.fleet()`."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..decide.fleet import SettingLoss
from ..errors import OptionText
from ..results.provenance import Provenance, provenance
from ..settings.conf import AllocConf
from ..settings.grid import Skip
from .checks import Progress, device_index, given, in_bytes, quiet, set_field, size, workers
from .inputs import (DeviceLimits, TraceInput, budget_limit, check_traces_and_grid, held, loaded, name_of,
                     once_each)
from .options import options_of


@dataclass(frozen=True)
class FleetOptions:
    """The jobs (a trace each) and the settings to rank."""

    traces: Sequence[TraceInput] = ()            # one trace per job
    confs: Sequence[str | AllocConf] = ()        # settings to rank ('default' for the default; default: the grid)
    grid: str | os.PathLike | None = None        # a file listing more settings ('-' for stdin; a list: confs)
    device_memory: int | str | None = None       # every job on a card of this memory (default: each one's own GPU)
    jobs: int | None = None                      # replay worker processes (default: every usable core)
    device: int | None = None                    # which device's trace, where a snapshot has several
    budget: int | float | str | None = None      # a memory limit on every job's card: a size, or a share of it

    def __post_init__(self) -> None:
        check_traces_and_grid(self)
        once_each(held(self.traces), "job", "and a job given twice would count twice")
        if self.device_memory is not None:
            set_field(self, "device_memory", size(self.device_memory, "device_memory"))
        workers(self.jobs)
        device_index(self.device)
        budget_limit(self.budget)


@dataclass(frozen=True)
class FleetResult:
    """The jobs by name (`job_names`), the settings ranked by what they cost them (fewest jobs they do not fit
    first, then fewest fitted only with alloc retries, then the worst loss, then the mean), the settings not
    simulated with why, where each job's trace came
    from, and the settings skipped by the grid's rules (a garbage collection threshold without a budget), with
    why."""

    jobs: tuple[str, ...]
    ranked: tuple[SettingLoss, ...]
    not_simulated: Mapping[AllocConf, str]
    origins: tuple[Provenance, ...]   # each job's trace: measured on a GPU, or a dry run for a card
    skipped: tuple[Skip, ...] = ()
    torch_versions: tuple[str | None, ...] = ()   # each job's trace's torch (None: it does not say)
    # what each job's replay rests on that the user must know, as replay warns it (`DeviceLimits.warnings`), said of
    # its job (`_said_of_jobs`)
    job_warnings: tuple[str, ...] = ()

    @property
    def best(self) -> SettingLoss | None:
        """The setting that loses least, where one fits every job (alloc retries or not) and some setting fits some
        job."""
        first = self.ranked[0] if self.ranked else None
        return first if first is not None and first.jobs and not first.failed else None

    @property
    def warnings(self) -> tuple[str, ...]:
        """The jobs' own warnings (`job_warnings`), and a line where the jobs' traces come from different torches:
        each job's replay follows its own torch's allocator (sim/target.py), so one setting may be read differently
        from job to job."""
        from ..sim.target import simulated_torch

        by_torch: dict[str, list[str]] = {}
        for job, torch in zip(self.jobs, self.torch_versions):
            by_torch.setdefault(simulated_torch(torch), []).append(job)
        if len(by_torch) < 2:
            return self.job_warnings
        each = "; ".join(f"torch {t}: {', '.join(jobs)}" for t, jobs in sorted(by_torch.items()))
        return (*self.job_warnings, f"the jobs' traces come from different torches ({each}): each job is replayed "
                                    f"with its own torch's allocator, which may read a setting differently")

    @property
    def left_out(self) -> tuple[str, ...]:
        """The jobs no setting fits on their card: they have no best to lose against (decide/fleet.py)."""
        ranked = {j.job for j in self.ranked[0].jobs} if self.ranked else set()
        return tuple(job for job in self.jobs if job not in ranked)

    def to_json(self) -> dict:
        from ..report.fleet import fleet_json

        return fleet_json(self)


def job_names(paths: list[str]) -> list[str]:
    """A job's name: its trace's file name without its suffixes; the path where two names are alike."""
    names = [Path(p).name.split(".")[0] or p for p in paths]
    return [n if names.count(n) == 1 else p for n, p in zip(names, paths)]


def _said_of_jobs(warned: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Each job's warnings (by job, in order) said of it, its name first ("a: ..."); a line that every one of
    several jobs gives, once, said of "every job". An OptionText stays one (the CLI names its options as flags),
    the name in it never read as a placeholder."""
    def said(job: str, warning: str) -> str:
        if isinstance(warning, OptionText):
            return OptionText(f"{job}: ".replace("{", "{{").replace("}", "}}") + warning.template, **warning.values)
        return f"{job}: {warning}"

    lists = list(warned.values())
    common = [w for w in lists[0] if all(w in others for others in lists[1:])] if len(lists) > 1 else []
    return (*(said("every job", w) for w in common),
            *(said(job, w) for job, warnings in warned.items() for w in warnings if w not in common))


def fleet(traces: Sequence[TraceInput] | None = None, confs: Sequence[str | AllocConf] | None = None,
          options: FleetOptions | None = None, *, progress: Progress | None = None, **fields: Any) -> FleetResult:
    """Rank settings across jobs by what each gives up (see the module docstring). `traces`: a list of paths or
    Traces, one per job; `confs`: the settings; `options` (FleetOptions) or its fields as keywords:
    `fleet(["a.xz", "b.xz"], device_memory="24GiB")`; `grid` is a file listing more settings, as in replay and fit.
    `progress` hears of each job as its trace loads."""
    from ..decide.fleet import rank_fleet
    from ..settings.grid import DEFAULT_GRID, expand, load_grid_file, ranked_settings
    from ..sim.points import fleet_peaks, job_peaks
    from ..sim.target import Target

    options = options_of("fleet", FleetOptions, options, given(fields, traces=traces, confs=confs))
    said = progress or quiet
    entries = [*options.confs, *(load_grid_file(options.grid) if options.grid else [])]
    sources = held(options.traces)
    names = job_names([name_of(source, i) for i, source in enumerate(sources)])
    # One trace at a time, replayed under every setting listed and dropped: only its figures are kept.
    candidates, figures, origins, budgeted, warned = expand(entries or DEFAULT_GRID), {}, [], False, {}
    for name, source in zip(names, sources):
        said(f"replaying {name}", None)
        trace = loaded(source, options.device)
        origins.append(provenance(trace.meta))
        limits = DeviceLimits.of(trace, in_bytes(options.device_memory), budget_limit(options.budget), None)
        budgeted = budgeted or limits.budget_bytes is not None   # given, or what an OOM snapshot allowed
        # as replay warns of this trace: the job's replay follows its trace's torch (sim/points.job_peaks)
        warned[name] = limits.warnings(trace, Target(trace.meta.get("torch_version")))
        figures[name] = job_peaks(trace, candidates, device_memory=limits.device_memory,
                                  budget_bytes=limits.budget_bytes, jobs=options.jobs)
        del trace   # the next is read only once this one is let go
    # As replay ranks a grid, for the torch that recorded them all: without a budget, what a memory fraction would
    # act on is skipped, and said so.
    versions = {job.torch_version for job in figures.values()}
    confs_ranked, skipped = ranked_settings(entries, versions.pop() if len(versions) == 1 else None,
                                            has_budget=budgeted)
    peaks, retries, not_simulated = fleet_peaks(figures, confs_ranked)
    return FleetResult(tuple(names), tuple(rank_fleet(peaks, retries)), not_simulated, tuple(origins), tuple(skipped),
                       tuple(figures[name].torch_version for name in names), _said_of_jobs(warned))
