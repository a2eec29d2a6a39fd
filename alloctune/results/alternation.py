"""A trial that alternated its setting with another inside one process, block by block (an in-process
confirmation, runtime/alternate.py): the blocks it timed, as its record keeps them (`Measurement.alternation`).
Measured, not predicted; decide/inprocess.py turns the blocks into the comparison. Standard library only (with the
typed reader): the start-up hook builds these inside the user's job.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Annotated

from .typed import at_least, from_json

Seconds = Annotated[float, at_least(0)]


class AlternationEnd(str, enum.Enum):
    """Why a run that alternated settings between blocks of steps (`Alternation`) stopped alternating."""

    RESOLVED = "resolved"             # its pairs of blocks timed the ratio to the resolution asked for
    MAX_PAIRS = "max_pairs"           # it ran the most pairs it was given
    MAX_SECONDS = "max_seconds"       # it ran for as long as it was given
    AGREED = "agreed"                 # another process of the job proposed the stop (each ends at that step)
    JOB_ENDED = "job_ended"           # the job ended first (the blocks it finished are kept)
    SWITCH_FAILED = "switch_failed"   # torch did not take a setting at run time: no blocks after it

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AlternatedBlock:
    """One timed block of steps in a run that alternated settings: its steps after the ones skipped, and their
    seconds between two synchronisations of the device."""

    candidate: bool     # under the trial's own setting (else under the one it is compared with, `Alternation.against`)
    steps: Annotated[int, at_least(1)]
    seconds: Seconds


@dataclass(frozen=True)
class Alternation:
    """A trial whose process switched between its own setting and another (`against`: '' = the default) at step
    boundaries, in blocks (runtime/alternate.py): each block begins with the device synchronised, the cache
    emptied and the setting set (the full string: keys not named reset), skips its first `skip_steps` steps,
    and times the rest with the device synchronised at both ends. Blocks come in pairs, one of each setting, the
    order flipping from pair to pair (candidate first in the first). Measured, not predicted."""

    against: str                               # canonical PYTORCH_CUDA_ALLOC_CONF ('' = the default)
    block_steps: Annotated[int, at_least(2)]   # steps per block, the skipped ones included
    skip_steps: Annotated[int, at_least(0)]
    target: Annotated[float, at_least(0)]       # the resolution it was to reach (half-width of the ratio's 95%
                                                # interval, 0.01: ±1%)
    end: AlternationEnd
    blocks: list[AlternatedBlock] = field(default_factory=list)   # in the order they ran, whole pairs only
    note: str | None = None   # what a failed switch read back

    @classmethod
    def from_json(cls, data: object, where: str = "alternation") -> "Alternation":
        return from_json(cls, data, where)
