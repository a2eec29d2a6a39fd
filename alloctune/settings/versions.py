"""What each torch version accepts in an allocator setting, and how it behaves.

Which versions accept each key is its entry in `keys.KEYS`; here are the checks made of it, the value ranges per
version and the behaviour switches (`docs/ALLOCATOR.md` §1 and §6, checked against c10's `AllocatorConfig.cpp` /
`CUDAAllocatorConfig.cpp`). Where a real interpreter is at hand,
`probe.check_settings` asks its torch as well; this table is the fallback and explains the answers. Which
variable each version reads, and the known problems of settings per version, are `known.py`'s.

Imports only the standard library: `probe.py` loads it inside child processes of other interpreters.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfError, shown
from .keys import KEYS, Version, default_mb

if TYPE_CHECKING:
    from .conf import AllocConf

# Newest release this table was checked against (torch 2.13.0 on this project's machines). For newer versions an
# unknown key is left to torch's own parse rather than rejected here.
NEWEST_KNOWN: Version = (2, 13, 0)


# (version, what changed): for docs, `compare`, and the simulator's version switches in `behaviour()`.
BEHAVIOUR_CHANGES: list[tuple[str, str]] = [
    ("2.0", "roundup_power2_divisions accepts the list form [256:1,512:2,>:4]; roundup_bypass_threshold_mb "
            "is removed (an unknown key from 2.0)"),
    ("2.1", "expandable_segments (opt-in); the current _record_memory_history signature"),
    ("2.4", "roundup_power2_divisions of 1 means plain 512-byte rounding (2.0 to 2.3: no rounding at all)"),
    ("2.5", "expandable segments in private pools; garbage collection and the oversize release skip "
            "expandable blocks"),
    ("2.6", "max_non_split_rounding_mb"),
    ("2.8", "a memory fraction of exactly 1.0 no longer enables the limit and garbage collection (changed "
            "between 2.5 and 2.10, 2.8 likely): garbage_collection_threshold needs a fraction below 1"),
    ("2.10", "'>' in the divisions list no longer overwrites the last explicit entry; per_process_memory_fraction "
             "key; max_split_size_mb may be 20 (was > 20)"),
    ("2.11", "large_segment_size_mb; max_split_size_mb and max_non_split_rounding_mb must be >= it"),
]


@dataclass(frozen=True)
class Behaviour:
    """The allocator behaviours that differ between versions, as switches for the simulator. Which keys a version
    has is each key's `since` in `keys.KEYS` (`check_keys`), not a switch here."""

    divisions_one_rounds_512: bool       # 2.4+: divisions 1 = 512-byte rounding; before: no rounding
    full_fraction_enables_gc: bool       # before 2.8: a fraction of 1.0 still switches the limit and GC on
    gt_overwrites_last_entry: bool       # before 2.10: '>' in the list also overwrote the last explicit entry
    expandable_in_private_pools: bool    # 2.5+: before, CUDA graphs' private pools cudaMalloc whole segments


# A part of up to 9 digits (no torch numbers one higher); a longer one is refused, not cut.
_VERSION = re.compile(r"^\s*v?(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?(?!\d)")


def parse_version(v: str) -> Version:
    """'2.11.0+cu130' -> (2, 11, 0); '2.12.0.dev20260101' -> (2, 12, 0); '2.1' -> (2, 1, 0)."""
    match = _VERSION.match(str(v))
    if not match:
        raise ConfError(f"expected a torch version such as '2.11.0+cu130', got {shown(v)}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _fmt(v: Version) -> str:
    return ".".join(map(str, v[:2]))


def behaviour(torch_version: str) -> Behaviour:
    v = parse_version(torch_version)
    return Behaviour(
        divisions_one_rounds_512=v >= (2, 4, 0),
        full_fraction_enables_gc=v < (2, 8, 0),
        gt_overwrites_last_entry=v < (2, 10, 0),
        expandable_in_private_pools=v >= (2, 5, 0),
    )


def simulation_note(torch_version: str) -> str | None:
    """What a replay following `torch_version` cannot promise, or None: the simulator knows the allocator from
    2.1 (expandable segments, today's trace format) to NEWEST_KNOWN."""
    v = parse_version(torch_version)
    if v < (2, 1, 0):
        return f"torch {torch_version} is older than 2.1, which this simulator does not model: results are approximate"
    if v > NEWEST_KNOWN:
        return (f"torch {torch_version} is newer than {_fmt(NEWEST_KNOWN)}: replayed with {_fmt(NEWEST_KNOWN)}'s "
                f"allocator behaviour; changes after it are unknown to this alloctune")
    return None


def replay_note(torch_version: str | None) -> str | None:
    """What a replay of a trace recorded under `torch_version` (None: the trace does not say) rests on, or None."""
    if not torch_version:   # a snapshot of the user's own: the version is an assumption
        return ("the trace does not say which torch recorded it: replayed with torch 2.11's allocator (traces "
                "from `alloctune record` and `dump_on_oom` say it)")
    return simulation_note(torch_version)


def changes_between(old: str, new: str) -> list[tuple[str, str]]:
    """The behaviour changes that lie between two torch versions (either order), oldest first."""
    lo, hi = sorted((parse_version(old), parse_version(new)))
    return [(ver, text) for ver, text in BEHAVIOUR_CHANGES if lo < parse_version(ver) <= hi]


def check_conf(conf: "AllocConf", torch_version: str) -> str | None:
    """None if torch `torch_version` accepts `conf`, else the reason, in words a user understands."""
    return check_keys(conf, torch_version) or _check_values(conf, parse_version(torch_version))


def check_keys(conf: "AllocConf", torch_version: str) -> str | None:
    """Only whether `torch_version` knows every key of `conf` (not their values)."""
    v = parse_version(torch_version)
    for key in conf.keys:
        spec = KEYS.get(key)
        if spec is None:
            if v <= NEWEST_KNOWN:
                return f"torch {_fmt(v)} does not know the key {key!r}"
            continue
        if v < spec.since:
            return f"{key} needs torch >= {_fmt(spec.since)} (torch {_fmt(v)} does not know it)"
        if spec.removed and v >= spec.removed:
            return f"{key} was removed in torch {_fmt(spec.removed)} (torch {_fmt(v)} rejects it)"
    return None


def known_keys(torch_version: str) -> list[str]:
    """The keys `torch_version`'s CUDA allocator accepts, per `keys.KEYS`."""
    v = parse_version(torch_version)
    return [key for key, spec in KEYS.items() if spec.since <= v and not (spec.removed and v >= spec.removed)]


def did_you_mean(conf: "AllocConf", torch_version: str) -> str | None:
    """' (did you mean 'expandable_segments'?)' for the first key of `conf` that `torch_version` does not know and
    that is close to one it does, else None."""
    known = known_keys(torch_version)
    for key in conf.keys:
        if key not in known and (close := difflib.get_close_matches(key, known, n=1, cutoff=0.6)):
            return f" (did you mean {close[0]!r}?)"
    return None


def _check_values(conf: "AllocConf", v: Version) -> str | None:
    name = f"torch {_fmt(v)}"
    floor = default_mb("large_segment_size_mb")   # kLargeBuffer: the large segment of every torch before the key
    large_segment = conf.large_segment_size_mb or floor
    mss = conf.max_split_size_mb
    if mss is not None:
        if v < (2, 10, 0):
            ok, need = mss > floor, f"> {floor}"
        elif v < (2, 11, 0):
            ok, need = mss >= floor, f">= {floor}"
        else:
            ok, need = mss >= large_segment, f">= large_segment_size_mb ({large_segment})"
        if not ok:
            return f"max_split_size_mb must be {need} on {name}, got {mss}"
    if conf.max_non_split_rounding_mb is not None:
        minimum = large_segment if v >= (2, 11, 0) else floor
        if conf.max_non_split_rounding_mb < minimum:
            return (f"max_non_split_rounding_mb must be >= {minimum} on {name}, "
                    f"got {conf.max_non_split_rounding_mb}")
    gc = conf.garbage_collection_threshold
    if gc is not None and not 0.0 < gc < 1.0:
        return f"garbage_collection_threshold must lie strictly between 0 and 1, got {gc:g}"
    if conf.large_segment_size_mb is not None and conf.large_segment_size_mb <= 10:
        return f"large_segment_size_mb must be > 10, got {conf.large_segment_size_mb}"
    divisions = conf.roundup_power2_divisions
    if isinstance(divisions, tuple) and v < (2, 0, 0):
        return f"the list form of roundup_power2_divisions needs torch >= 2.0 ({name} takes a single number)"
    return None

