"""Every allocator setting key, declared once: `KEYS`, one `Key` per name.

A key's entry says how its value is parsed and printed back, which torch versions accept it, whether a run-time
re-parse changes it in the parsing process, what the allocator reports back about it, its default, the values a
search tries and what it means to the simulator. The table's order is the order a setting prints its keys in
(`AllocConf`'s fields follow it); the search's own order is `SEARCH_ORDER`. The setting string (`conf.py`), the
version table (`versions.py`), the known problems (`known.py`), the readback (`readback.py`), the grid rules
(`grid.py`), the probe's child, the search space (`sim/space.py`) and the simulator's configuration
(`sim/config.py`) read it from here. A key the simulator models also has its meaning in `sim/config.py`,
`sim/allocator.py` and `sim/_core.cpp`.

Facts: `docs/ALLOCATOR.md` §1 and §6, checked against c10's `AllocatorConfig.cpp` / `CUDAAllocatorConfig.cpp`.
Standard library only (with `errors`): the trial child, the start-up hook and the probe's child load it under
other interpreters.
"""
from __future__ import annotations

import enum
import re
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from ..errors import ConfError, shown

Version = Tuple[int, int, int]

# Divisions in list form, as PyTorch writes it: ((256, 1), (512, 2), ('>', 4)) for "[256:1,512:2,>:4]".
DivisionList = Tuple[Tuple["int | str", int], ...]


class Sim(str, enum.Enum):
    """What a key means to the simulator."""

    MODELLED = "modelled"       # both cores follow it (sim/config.py gives its numbers)
    IGNORED = "ignored"         # no effect on device memory (host memory, locking, graph capture): left out
    UNMODELLED = "unmodelled"   # may change device memory in a way the simulator does not follow: not replayed


class Readback(str, enum.Enum):
    """How a process learns which value is in force (`readback.py`, the trial child)."""

    ALWAYS = "always"        # every version: the allocator backend, memory_stats' max_split_size
    SNAPSHOT = "snapshot"    # where a snapshot carries `allocator_settings` (recent versions), under the key's name
    SHOWN = "shown"          # ... read from there into the setting in force, but never compared with the one asked


@dataclass(frozen=True)
class Key:
    name: str
    since: Version                                # the first release whose allocator accepts it
    removed: Optional[Version] = None             # the first that no longer does
    parse: Optional[Callable[[str, str], object]] = None   # (key, raw) -> value; None: kept verbatim, a plain word
    sim: Sim = Sim.IGNORED
    native_only: bool = False       # backend:cudaMallocAsync ignores it (no blocks to split, round or collect)
    # A run-time re-parse (torch 2.9 on, `_accelerator_setAllocatorSettings`; the probe's child judges settings
    # with it) sets it in the parsing process:
    in_place: bool = False
    resets: bool = False            # ... and puts it back to its default when that parse does not give it
    kept: bool = False              # ... and keeps it for later parses (`persists`)
    readback: Optional[Readback] = None
    # The value in force when the key is not given (None: the feature is off), as the allocator has it: what the
    # readback compares, what the probe's child restores, what the simulator and the version checks assume.
    default: object = None
    search: tuple = ()              # the values a search of the settings space tries (`sim/space.py`)
    needs: Optional[str] = None     # a key without which this one changes nothing
    needs_budget: bool = False      # does nothing without a memory fraction below 1
    is_budget: bool = False         # a memory limit itself: a sweep's --budget sets it, a grid does not

    @property
    def persists(self) -> Optional[str]:
        """For a key a run-time parse keeps for later ones (`kept`), the value to parse after a setting that names
        it so that the next starts from the default: its `default`, as a setting writes it. None for the others."""
        return format_value(self.default) if self.kept else None


def _bool(key: str, raw: str) -> bool:
    # PyTorch accepts exactly 'True' / 'False' (allocator config tokenizer, all versions).
    if raw not in ("True", "False"):
        raise ConfError(f"{key} expects 'True' or 'False' (capitalised, as PyTorch requires), got {raw!r}")
    return raw == "True"


# The largest whole number a key takes (MiB, divisions, a divisions list's bounds): 2^30, 1 PiB as MiB, a thousand
# times any card. torch up to 2.8 reads these values with `stoi` and refuses more than 2^31 - 1; from 2.9 (`stoull`)
# it refuses more than 2^64 - 1, clamps a MiB value to 2^44 - 1 (SIZE_MAX / 1 MiB) and then adds it to request sizes
# in 64 bits (request + max_non_split_rounding, an expandable segment's page count), where near the clamp it wraps,
# as `512 * divisions` does from 2^55 divisions. Below this bound every torch reads a value as written and none of
# its sums (nor the simulator cores') wraps, so a value means what the key says; a larger one is refused here.
LARGEST = 1 << 30
_WHOLE = re.compile(r"[+-]?[0-9]+")   # ASCII digits, as torch's stoi/stoull read them


def _mib(key: str, raw: str) -> int:
    return _int(key, raw, " of MiB")


def _int(key: str, raw: str, unit: str = "") -> int:
    if not _WHOLE.fullmatch(raw):
        raise ConfError(f"{key} expects a whole number{unit}, got {shown(raw)}")
    digits = raw.lstrip("+-").lstrip("0")
    value = int(digits or "0") if len(digits) <= 19 else LARGEST + 1   # more digits: over LARGEST, left unread
    if value <= 0 or raw.startswith("-"):
        raise ConfError(f"{key} must be positive, got {raw!r}")
    if value > LARGEST:
        raise ConfError(f"{key} must be at most {LARGEST} (2^30), got {shown(raw)}: no device has use for more, "
                        f"and torch refuses larger values or clamps them, or its size arithmetic overflows on them")
    return value


def _fraction(key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfError(f"{key} expects a number, got {shown(raw)}") from None
    if not 0.0 <= value <= 1.0:
        raise ConfError(f"{key} expects a value in [0, 1], got {shown(raw)}")
    # torch's stod refuses a number too small for a normal double (1e-400, 5e-324), where float() reads 0 or less
    if value < sys.float_info.min and any(digit in raw.partition("e")[0].partition("E")[0] for digit in "123456789"):
        raise ConfError(f"{key}: {shown(raw)} is too small for torch to read (below {sys.float_info.min:g}); "
                        f"write 0 or a larger value")
    return value


def _backend(key: str, raw: str) -> str:
    if raw not in ("native", "cudaMallocAsync"):
        raise ConfError(f"backend expects 'native' or 'cudaMallocAsync', got {raw!r}")
    return raw


def _divisions(key: str, raw: str) -> int | DivisionList:
    if not raw.startswith("["):
        return _power_of_two(key, raw)
    if not raw.endswith("]"):
        raise ConfError(f"{key}: unterminated list {raw!r}")
    entries: list[tuple[int | str, int]] = []
    for item in raw[1:-1].split(","):
        bound, sep, div = (s.strip() for s in item.partition(":"))
        if not sep:
            raise ConfError(f"{key}: expected 'size_mb:divisions' or '>:divisions' in list, got {item!r}")
        if bound == ">":
            entries.append((">", _power_of_two(key, div)))
            continue
        if not _WHOLE.fullmatch(bound):
            raise ConfError(f"{key}: list bound must be a size in MiB or '>', got {shown(bound)}")
        size = _int(key, bound)
        if size & (size - 1):
            raise ConfError(f"{key}: list bound must be a power of two, got {bound!r}")
        entries.append((size, _power_of_two(key, div)))
    if not entries:
        raise ConfError(f"{key}: empty list")
    return tuple(entries)


def _power_of_two(key: str, raw: str) -> int:
    value = _int(key, raw)
    if value & (value - 1):
        raise ConfError(f"{key} expects a power of two, got {raw!r}")
    return value


def format_value(value: object) -> str:
    """A parsed value in canonical form: True/False, '[256:1,>:4]', 0.6, 128."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, tuple):
        return "[" + ",".join(f"{b}:{d}" for b, d in value) + "]"
    if isinstance(value, float):   # short, unless that would round it: torch must read what was judged
        return short if float(short := f"{value:g}") == value else repr(value)
    return str(value)


# The keys a setting gives a value of (those with a parser) come first, in the order a setting prints them
# (`AllocConf`'s fields follow it: tests/settings/test_keys.py); those before 2.0 are given their first release
# (alloctune targets >= 2.1).
_ENTRIES = (
    # Chosen once, when torch loads: a run-time re-parse naming another one fails an assertion (probe_child).
    Key("backend", (2, 0, 0), parse=_backend, sim=Sim.MODELLED, readback=Readback.ALWAYS, default="native"),
    Key("expandable_segments", (2, 1, 0), parse=_bool, in_place=True, kept=True,
        readback=Readback.SNAPSHOT, default=False, search=(True,), sim=Sim.MODELLED, native_only=True),
    Key("max_split_size_mb", (1, 10, 0), parse=_mib, in_place=True, resets=True, readback=Readback.ALWAYS,
        search=(20, 32, 64, 128, 256, 512, 1024, 2048, 4096), sim=Sim.MODELLED, native_only=True),
    # A snapshot carries one value per size interval: a single one reads back, never the list form as set.
    Key("roundup_power2_divisions", (1, 12, 0), parse=_divisions, in_place=True, resets=True,
        readback=Readback.SHOWN, search=(1, 2, 4, 8, 16, 32), sim=Sim.MODELLED, native_only=True),
    Key("garbage_collection_threshold", (1, 11, 0), parse=_fraction, in_place=True, resets=True,
        readback=Readback.SNAPSHOT, search=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95), needs_budget=True, sim=Sim.MODELLED,
        native_only=True),
    # 2.13's run-time parse resets it too, to large_segment_size_mb's value; no check reads it otherwise. By
    # default kLargeBuffer, 20 MiB.
    Key("max_non_split_rounding_mb", (2, 6, 0), parse=_mib, in_place=True, needs="max_split_size_mb", default=20,
        search=(40, 64, 128, 256, 512, 1024), sim=Sim.MODELLED, native_only=True),
    # Multiples of 2 MiB: the page of large-pool expandable segments must be whole device pages. It persists, and
    # is the minimum of max_split_size_mb and max_non_split_rounding_mb in every later run-time parse
    # (tests/trial/test_probe.py shows it). By default 20 MiB (2.13's AllocatorConfig.h), kLargeBuffer, the size
    # every torch before 2.11 has without the key: the segment, and the floor of max_split_size_mb.
    Key("large_segment_size_mb", (2, 11, 0), parse=_mib, in_place=True, kept=True, default=20,
        search=(12, 16, 32, 40, 64, 128), sim=Sim.MODELLED, native_only=True),
    Key("per_process_memory_fraction", (2, 10, 0), parse=_fraction, sim=Sim.MODELLED, is_budget=True),
    Key("roundup_bypass_threshold_mb", (1, 13, 0), removed=(2, 0, 0)),
    # No effect on device memory layout. Their first versions are the earliest we could place them; where
    # unsure we err early, so the static check never rejects what torch accepts (torch's parse decides).
    Key("release_lock_on_cudamalloc", (2, 2, 0)),
    Key("pinned_use_cuda_host_register", (2, 2, 0)),
    Key("pinned_num_register_threads", (2, 2, 0)),
    Key("pinned_use_background_threads", (2, 6, 0)),
    # During CUDA graph capture: a reachability check on the graph instead of deferring cross-stream frees. A
    # trace holds no capture, so a replay has nothing to follow.
    Key("graph_capture_record_stream_reuse", (2, 8, 0)),
    Key("pinned_reserve_segment_size_mb", (2, 8, 0)),
    Key("pinned_max_round_threshold_mb", (2, 10, 0)),
    Key("pinned_max_cached_size_mb", (2, 10, 0)),
    # Newer keys (docs/ALLOCATOR.md §1): throw_on_cudamalloc_oom in 2.12's documentation (with a memory fraction,
    # for serving); the others after 2.13 (NEWEST_KNOWN), so 2.14 at the earliest. What the first three do to
    # device memory is not known here: a replay refuses them rather than ignore them.
    Key("throw_on_cudamalloc_oom", (2, 12, 0), sim=Sim.UNMODELLED),
    Key("expandable_segments_reserve", (2, 14, 0), sim=Sim.UNMODELLED),
    Key("expandable_segments_reserve_by_class", (2, 14, 0), sim=Sim.UNMODELLED),
    Key("pinned_free_catch_all", (2, 14, 0)),
)

KEYS: dict[str, Key] = {key.name: key for key in _ENTRIES}

# The order the search steps through the keys with search values (`sim/space.py`): which of several settings
# that behave alike on a trace it replays, and which it leaves at its budget, follow from it.
SEARCH_ORDER = ("roundup_power2_divisions", "max_split_size_mb", "expandable_segments", "max_non_split_rounding_mb",
                "large_segment_size_mb", "garbage_collection_threshold")


def names(test: Callable[[Key], object]) -> tuple[str, ...]:
    """The keys for which `test(key)` holds, in table order."""
    return tuple(key.name for key in _ENTRIES if test(key))


def default_mb(name: str) -> int:
    """The default of a key given in MiB (`large_segment_size_mb`, ...), as the simulator and the version checks
    assume it."""
    value = KEYS[name].default
    assert isinstance(value, int), f"{name} has no default in MiB"
    return value
