"""The growth check (opt-in, for what a short trial cannot tell): did reserved memory keep rising from step k to
step 2k of a job while allocated memory did not? Pure: it reads samples (step, reserved bytes, allocated bytes)
of one process and device, taken after the job's optimizer steps, and decides with explicit thresholds.

A steady job reserves what its largest step needs within its first steps and then reuses it: from k to 2k,
reserved stays put, or rises with allocated (a cache that fills, a batch that grows). Reserved that rises while
allocated does not is memory the allocator holds and cannot reuse, as with expandable segments and
max_split_size_mb on torch 2.12 and later (pytorch#123548: reserved up about 138 MiB per cycle, allocated flat).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Sequence

MiB = 2**20


@dataclass(frozen=True)
class Sample:
    step: int        # optimizer steps done when the sample was taken
    reserved: int    # bytes the allocator holds on the device
    allocated: int   # bytes in live tensors


@dataclass(frozen=True)
class Thresholds:
    """Policy, not measurements. Reserved must rise by `min_rise_bytes` and by `min_rise_fraction` of what it was
    at k, so that a segment or two of rounding (the large segments are 20 MiB) never counts while #123548's
    growth (reserved from 220 MiB to 14 GiB over 100 cycles) counts within a few cycles; allocated must rise by less than
    `allocated_share` of reserved's rise, so a job that fills a cache is not flagged for the cache."""

    min_rise_bytes: int = 256 * MiB
    min_rise_fraction: float = 0.10
    allocated_share: float = 0.5


class Verdict(str, Enum):
    GROWING = "growing"        # reserved rose from k to 2k, allocated did not
    STEADY = "steady"
    UNDECIDED = "undecided"    # no samples at k and 2k to compare


@dataclass(frozen=True)
class Growth:
    verdict: Verdict
    reason: str
    at_k: Sample | None = None
    at_2k: Sample | None = None


def growth(samples: Sequence[Sample], thresholds: Thresholds = Thresholds()) -> Growth:
    """Compare the last sample (step 2k) with the last one at or before step k = half its step. Steps must
    rise strictly and bytes be non-negative (ValueError otherwise: the samples come from one process's file)."""
    for earlier, later in zip(samples, samples[1:]):
        if later.step <= earlier.step:
            raise ValueError(f"growth samples must rise in step, got step {later.step} after {earlier.step}")
    for s in samples:
        if s.step < 0 or s.reserved < 0 or s.allocated < 0:
            raise ValueError(f"growth sample with a negative value: {s}")
    if len(samples) < 2:
        return Growth(Verdict.UNDECIDED, f"{len(samples)} sample(s): two, at steps k and 2k, are needed")
    last = samples[-1]
    k = last.step // 2
    before = [s for s in samples[:-1] if 1 <= s.step <= k]
    if not before:
        return Growth(Verdict.UNDECIDED, f"no sample between step 1 and step {k}, half of the last ({last.step})")
    first = before[-1]
    rise = last.reserved - first.reserved
    allocated_rise = last.allocated - first.allocated
    needed = max(thresholds.min_rise_bytes, thresholds.min_rise_fraction * first.reserved)
    span = f"from step {first.step} to {last.step}"
    if rise < needed:
        return Growth(Verdict.STEADY, f"reserved rose {_mib(rise)} {span} (flagged from {_mib(needed)})",
                      first, last)
    if allocated_rise >= thresholds.allocated_share * rise:
        return Growth(Verdict.STEADY, f"reserved rose {_mib(rise)} {span}, with allocated ({_mib(allocated_rise)})",
                      first, last)
    return Growth(Verdict.GROWING, f"reserved rose {_mib(rise)} {span} while allocated rose {_mib(allocated_rise)}",
                  first, last)


def _mib(n: float) -> str:
    return f"{n / MiB:,.0f} MiB"
