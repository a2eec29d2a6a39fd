"""What the allocator reports back about its settings: a snapshot's `allocator_settings` as a setting, and
whether the setting in force is the one asked for (the trial child and the start-up hook check it). Which keys
read back, and how, is each key's `readback` in `keys.KEYS`."""
from __future__ import annotations

from typing import Any

from .conf import AllocConf
from .keys import KEYS, LARGEST, Readback, format_value

_FROM_SNAPSHOT = (Readback.SNAPSHOT, Readback.SHOWN)
_COMPARED = (Readback.ALWAYS, Readback.SNAPSHOT)


def conf_from_settings(settings: dict | None, max_split: int) -> AllocConf:
    """The setting for a snapshot's `allocator_settings` (each key `KEYS` reads from there, under its own name) and
    memory_stats' `max_split_size` (bytes; -1 or SIZE_MAX: none). Where the snapshot carries `max_split_size` too,
    that one is read: memory_stats' copy is taken once, when the allocator starts, and a run-time parse leaves it
    behind (torch 2.11 on an H100: 128 MiB read there after a switch back to the default, -1 in the snapshot, in
    force)."""
    raw: dict[str, str] = {}
    if isinstance(settings, dict) and isinstance(settings.get("max_split_size"), int):
        max_split = settings["max_split_size"]
    if isinstance(settings, dict):
        for key in KEYS.values():
            if key.readback in _FROM_SNAPSHOT and (text := _snapshot_value(settings.get(key.name))) is not None:
                raw[key.name] = text
    # Unset reads back as SIZE_MAX (or -1); a split limit above LARGEST MiB, larger than any block, acts as none too.
    if 0 < max_split // 2**20 <= LARGEST:
        raw["max_split_size_mb"] = str(max_split // 2**20)   # the one key memory_stats reports (Readback.ALWAYS)
    values: dict[str, Any] = {}   # each as its key's parser reads torch's figure printed canonically
    for name, text in raw.items():
        parse = KEYS[name].parse
        assert parse is not None   # every key read back is one AllocConf holds
        values[name] = parse(name, text)
    return AllocConf(**values)


def _snapshot_value(value: object) -> str | None:
    """A snapshot's figure as a setting writes it; None where it is the allocator's default (off, 0, unset)."""
    if isinstance(value, (dict, list)):
        # Divisions: a dict keyed by interval start in MiB ('1', '2', '4', ...) on recent versions, a list on older
        # ones; a setting can say them only when every interval that rounds has the same.
        divisions = [d for d in (value.values() if isinstance(value, dict) else value) if isinstance(d, int) and d > 1]
        return str(divisions[0]) if divisions and len(set(divisions)) == 1 else None
    if isinstance(value, bool):   # a flag
        return format_value(value) if value else None
    if isinstance(value, (int, float)):   # a fraction, kept in single precision (0.6 reads back as 0.6000000238):
        return f"{float(value):g}" if value else None   # six digits give what was written
    return None


def readable_keys(has_snapshot_settings: bool) -> frozenset[str]:
    """The keys a native allocator lets us read back: on every version, and where a snapshot carries
    `allocator_settings`."""
    ways = _COMPARED if has_snapshot_settings else (Readback.ALWAYS,)
    return frozenset(key.name for key in KEYS.values() if key.readback in ways)


def mismatch(asked: AllocConf, effective: AllocConf, readable: frozenset) -> str | None:
    """A reason when a key that this torch lets us read back differs from what was asked; None when all agree."""
    checked = ["backend"] if asked.is_async else [name for name, key in KEYS.items() if key.readback in _COMPARED]
    problems = []
    for name in checked:
        want, got = _in_force(asked, name), _in_force(effective, name)
        if name in readable and want != got:
            problems.append(f"{name}: {want} asked, {got} in force")
    return "allocator settings did not take effect: " + "; ".join(problems) if problems else None


def _in_force(conf: AllocConf, name: str) -> object:
    value = getattr(conf, name)
    return KEYS[name].default if value is None else value
