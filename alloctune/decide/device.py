"""Device memory figures of trials: which are usable, and what they say of the card.

A device figure counts other processes' memory too where it is the device's total - free (a trial still exiting, a
neighbour's job): contamination only adds, so a setting's figure is the lowest over its repeats, repeats further
apart than DEVICE_AGREEMENT are flagged, and a reading far above the trial's peak reserved plus what a trial holds
outside the allocator is marked contaminated and not used (`Contamination`, kept in choice.json: results/figures.py).
A setting whose peak comes within a little of the device's memory took the whole card (`takes_whole_card`): it fits
only because nothing else runs there.
"""
from __future__ import annotations

from typing import Iterable

from ..results.figures import Contamination
from ..results.records import TrialRecord, TrialState
from ..units import GiB
from .parameters import DEFAULT_TIE
from .stats import relative_spread

# Device memory a clean trial holds beyond its peak reserved (CUDA context, kernels, libraries' own buffers), where
# its record has no figure of its own (`Measurement.overhead_bytes`). In the committed H200 results (results/,
# torch 2.11, 2026-11-29 to 2026-12-01) device_peak_used_bytes - peak_reserved_bytes of an OK trial was 0.20-0.77
# GiB for one process under the native allocator (least where reserved filled the card), 0.81-0.83 GiB under
# cudaMallocAsync and 1.58 GiB for each rank of a two-rank torchrun job (NCCL's buffers): 2 GiB covers them all.
CONTEXT_ALLOWANCE = 2 * GiB
# Repeats whose device figures are further apart than this are flagged (cudaMallocAsync's moved 0.1-0.2%, H200).
DEVICE_AGREEMENT = 0.01


# A setting takes (nearly) the whole card when its peak comes within the larger of these of the device's memory: it
# fits only because nothing else runs there. 1 GiB covers what the CUDA context holds outside the allocator (0.76 GiB
# on the H200: overhead_bytes of workloads/traces/*-h200.xz), so that reserving all the rest counts; 1% scales it.
WHOLE_CARD_BYTES = GiB
WHOLE_CARD_FRACTION = 0.01


def takes_whole_card(peak_bytes: int | float | None, device_bytes: int | None) -> bool:
    """Whether a peak of `peak_bytes` took (nearly) all of a device of `device_bytes` (the rule above)."""
    if peak_bytes is None or not device_bytes:
        return False
    return device_bytes - peak_bytes <= max(WHOLE_CARD_BYTES, WHOLE_CARD_FRACTION * device_bytes)


def device_memory(records: Iterable[TrialRecord]) -> int | None:
    """The memory of the device the records ran on (a replay's: the simulated one's), as their provenance says."""
    known = [r.env["gpu_memory"] for r in records if isinstance(r.env.get("gpu_memory"), int)]
    return max(known) if known else None


def contamination(record: TrialRecord, tie: float = DEFAULT_TIE) -> Contamination | None:
    """`record`'s device figure judged against its own peak reserved (None: plausible, or no figure)."""
    m = record.measurement
    if m is None or m.device_peak_used_bytes is None:
        return None
    measured = m.overhead_bytes is not None
    context = m.overhead_bytes if m.overhead_bytes is not None else CONTEXT_ALLOWANCE
    # "Far above": beyond the tie, the margin within which two memories count as equal anyway.
    if m.device_peak_used_bytes <= (m.peak_reserved_bytes + context) * (1 + tie):
        return None
    return Contamination(record.repeat, m.device_peak_used_bytes, m.peak_reserved_bytes, context, measured, tie)


def plausible_device(trials: Iterable[TrialRecord]) -> tuple[int | None, float, tuple[Contamination, ...]]:
    """(the lowest plausible device figure, their spread, the contaminated repeats) over the OK repeats."""
    judged = [(m.device_peak_used_bytes, contamination(r)) for r in trials
              if r.state is TrialState.OK and (m := r.measurement) is not None and m.device_peak_used_bytes is not None]
    clean = [device for device, bad in judged if bad is None]
    return (min(clean) if clean else None), relative_spread([float(d) for d in clean]), tuple(b for _, b in judged if b)
