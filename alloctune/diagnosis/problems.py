"""Which of the recommended setting's known problems (`settings/known.py`) matter for the job that ran out of
memory, as data (pure): what the sources tell of its torch and of what it did, and the few worth reading first.

Every problem of the setting on the torch the sources name counts (where only the message's layout tells the torch,
those whose versions meet that range). Where the job's features are known whole (a results folder's trial, which
the start-up hook observed), only those it used matter; else nothing rules a problem out, and those whose
conditions the job was seen to meet (a graph pool in the figures: it captured CUDA graphs) come first, then the
worst, then the fewest conditions not seen. The first `MOST_SHOWN` are shown, the rest counted (`--all-problems`
shows them all).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings.conf import AllocConf
from ..settings.known import Feature, Problem, Severity, Versions, problems
from .facts import OomFacts
from .message import OomMessage

MOST_SHOWN = 3


@dataclass(frozen=True)
class Job:
    """What the sources tell of the job that failed."""

    torch_version: str | None = None   # exact, from a snapshot
    versions: Versions | None = None   # else the range of releases that print the message's layout
    seen: frozenset[Feature] = frozenset()   # what it was seen doing
    whole: bool = False                # `seen` is all it did (a trial's record), not what a figure happened to show


@dataclass(frozen=True)
class KnownProblems:
    conf: str
    job: Job
    shown: tuple[Problem, ...]         # the ones to read, in order
    hidden: tuple[Problem, ...] = ()   # the rest, counted

    def applies(self, p: Problem) -> bool:
        """The job was seen doing all the problem needs."""
        return p.when <= self.job.seen


def known_problems(conf: str, job: Job, everything: bool = False) -> KnownProblems:
    """The problems of `conf` that matter for `job`, the first `MOST_SHOWN` shown (all, with `everything`)."""
    found = [p for p in problems(AllocConf.parse(conf), job.torch_version, set(Feature))
             if job.versions is None or p.versions.overlaps(job.versions)]
    matter = [p for p in found if p.when <= job.seen] if job.whole else found
    ranked = sorted(matter, key=lambda p: (not p.when <= job.seen, list(Severity).index(p.severity),
                                            len(p.when - job.seen)))
    shown = ranked + [p for p in found if p not in ranked] if everything else ranked[:MOST_SHOWN]
    return KnownProblems(conf, job, tuple(shown), tuple(p for p in found if p not in shown))


def job_of(torch_version: str | None, message: OomMessage | None, facts: OomFacts | None,
           features: frozenset[Feature] | None) -> Job:
    """What the sources tell of the job: its torch (a snapshot's; else the message layout's range), and what it did:
    a trial's record of it (`features`, whole), else what the figures show (free memory in CUDA graph pools, or
    memory allocated in them: it captured CUDA graphs)."""
    versions = message.torch_versions if message is not None and torch_version is None else None
    if features is not None:
        return Job(torch_version, versions, features, whole=True)
    graphs = (facts is not None and facts.graph_pools_free > 0) or bool(message and message.private_pools)
    return Job(torch_version, versions, frozenset({Feature.CUDA_GRAPHS}) if graphs else frozenset())
