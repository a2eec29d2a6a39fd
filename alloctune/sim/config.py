"""What one allocator setting means to the simulator: `AllocatorConfig`, the numbers both simulator cores read.

Upstream keeps these in `c10/cuda/CUDAAllocatorConfig.*`; here they are computed once per replay from an
`AllocConf` (syntax only), the device, the budget and the torch version whose behaviour to follow
(switches from `versions.behaviour`):
- divisions of 1: plain 512-byte rounding from 2.4; no rounding at all (the size as asked) in 2.0-2.3.
- `>` in the divisions list: from 2.10 it covers the intervals after the last explicit entry; before 2.10 it
  also overwrote that last entry.
- a memory fraction (or budget) of the whole device: before 2.8 it still switches the limit and GC on; from
  2.8 only a fraction below 1 does.
- expandable segments in CUDA graphs' private pools from 2.5; before, a private pool cudaMallocs whole segments
  even with `expandable_segments:True` (which still decides how blocks split).
- `large_segment_size_mb` (the segment for 1-10 MiB requests and the page of large-pool expandable segments)
  exists from 2.11; earlier versions use its default (`keys.KEYS`). A key that `torch_version` does not know
  raises `ConfError`.
`backend:cudaMallocAsync` hands memory to the driver's pool and cannot be simulated: it raises `ConfError`, as
does a key whose effect on device memory the simulator does not follow (`Sim.UNMODELLED` in `settings/keys.py`);
the keys without one (`Sim.IGNORED`) are left out.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfError
from ..settings.conf import AllocConf
from ..settings.keys import KEYS, Sim, default_mb
from ..settings.versions import behaviour, check_keys
from .blocks import DIVISION_INTERVALS, NO_LIMIT, MiB


@dataclass(frozen=True)
class AllocatorConfig:
    label: str                   # the setting as `AllocConf.label` prints it
    device_memory: int           # bytes a cudaMalloc may use in all, the CUDA context's share included
    overhead: int                # what the CUDA context holds outside the allocator
    allowed: int | None          # what a memory fraction or budget allows; None: no limit (and no GC)
    max_split: int               # max_split_size_mb in bytes; NO_LIMIT when unset
    non_split_rounding: int      # max_non_split_rounding_mb in bytes
    large_segment: int           # segment for 1-10 MiB requests; page of large-pool expandable segments
    divisions: tuple[int, ...]   # roundup_power2_divisions per size interval (`division_table`)
    divisions_one_rounds_512: bool
    expandable: bool
    expandable_private: bool     # expandable segments in private pools (CUDA graphs) too
    gc_threshold: float          # 0.0: garbage collection off


def allocator_config(conf: AllocConf, device_memory: int, *, budget_bytes: int | None = None,
                     overhead_bytes: int = 0, torch_version: str = "2.11") -> AllocatorConfig:
    """`conf` as torch `torch_version` reads it on a device of `device_memory` bytes; `ConfError` when it
    cannot be simulated."""
    if conf.is_async:
        raise ConfError("backend:cudaMallocAsync hands memory to the CUDA driver's pool, which cannot be "
                        "simulated block by block: measure it on the GPU")
    problem = check_keys(conf, torch_version)
    if problem:
        raise ConfError(f"cannot simulate {conf.label!r} as torch {torch_version}: {problem}")
    if unmodelled := [key for key in conf.keys if key in KEYS and KEYS[key].sim is Sim.UNMODELLED]:
        raise ConfError(f"cannot simulate {conf.label!r}: what {', '.join(unmodelled)} does to device memory is not "
                        "known to this simulator: measure it on the GPU")
    if device_memory <= 0:
        raise ConfError(f"device memory must be positive, got {device_memory}")
    if budget_bytes is not None and budget_bytes <= 0:
        raise ConfError(f"a memory budget must be positive, got {budget_bytes}")
    b = behaviour(torch_version)
    allowed = _allowed_memory(conf, device_memory, budget_bytes, b.full_fraction_enables_gc)
    threshold = conf.garbage_collection_threshold or 0.0
    return AllocatorConfig(
        label=conf.label,
        device_memory=device_memory,
        overhead=overhead_bytes,
        allowed=allowed,
        max_split=conf.max_split_size_mb * MiB if conf.max_split_size_mb else NO_LIMIT,
        non_split_rounding=(conf.max_non_split_rounding_mb or default_mb("max_non_split_rounding_mb")) * MiB,
        # a torch before the key has its default (`check_keys` above refuses the key there)
        large_segment=(conf.large_segment_size_mb or default_mb("large_segment_size_mb")) * MiB,
        divisions=tuple(division_table(conf, b.gt_overwrites_last_entry)),
        divisions_one_rounds_512=b.divisions_one_rounds_512,
        expandable=bool(conf.expandable_segments),
        expandable_private=bool(conf.expandable_segments) and b.expandable_in_private_pools,
        gc_threshold=threshold if allowed is not None and threshold > 0 else 0.0,
    )


def _allowed_memory(conf: AllocConf, device_memory: int, budget: int | None, full_fraction_counts: bool) -> int | None:
    """What a memory fraction allows, or None when no limit is in force (then GC is off as well)."""
    if budget is not None:
        if budget < device_memory or full_fraction_counts:
            return budget
        return None
    fraction = conf.per_process_memory_fraction
    if fraction is None or (fraction >= 1.0 and not full_fraction_counts):
        return None
    return int(fraction * device_memory)


def division_table(conf: AllocConf, gt_overwrites_last_entry: bool = False) -> list[int]:
    """Divisions per size interval [2^k MiB, 2^(k+1) MiB), k = 0..15 (the first also covers smaller sizes).

    List form: an entry 'B:d' sets the interval of B MiB and, if it is the first entry, every interval below;
    '>:d' sets the intervals after the last explicit entry (and that entry too before torch 2.10).
    """
    value = conf.roundup_power2_divisions
    table = [0] * DIVISION_INTERVALS
    if value is None:
        return table
    if isinstance(value, int):
        return [value] * DIVISION_INTERVALS
    last, first = 0, True
    for bound, div in value:
        if bound == ">":
            start = last if gt_overwrites_last_entry else last + 1
            table[start:] = [div] * (DIVISION_INTERVALS - start)
            continue
        index = min(int(bound).bit_length() - 1, DIVISION_INTERVALS - 1)
        if first:
            table[:index] = [div] * index
            first = False
        table[index] = div
        last = index
    return table
