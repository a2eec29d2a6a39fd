"""What the allocator reports back about its settings: a snapshot's `allocator_settings` as a setting, and
whether the setting in force is the one asked for (the trial child and the start-up hook check it). Which keys
read back, and how, is each key's `readback` in `keys.KEYS`."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from .conf import AllocConf
from .keys import KEYS, Readback, format_value


def conf_from_settings(settings: dict | None, max_split: int) -> AllocConf:
    """The setting for a snapshot's `allocator_settings` and memory_stats' `max_split_size` (bytes)."""
    raw: dict[str, str] = {}
    if isinstance(settings, dict):
        if settings.get("expandable_segments"):
            raw["expandable_segments"] = "True"
        if settings.get("garbage_collection_threshold"):
            raw["garbage_collection_threshold"] = format_value(float(settings["garbage_collection_threshold"]))
        divisions = settings.get("roundup_power2_divisions") or []
        # A dict keyed by interval start in MiB ('1', '2', '4', ...) on recent versions, a list on older ones.
        divisions = [d for d in (divisions.values() if isinstance(divisions, dict) else divisions)
                     if isinstance(d, int) and d > 1]
        if divisions and len(set(divisions)) == 1:
            raw["roundup_power2_divisions"] = str(divisions[0])
    if 0 < max_split < 2**62:
        raw["max_split_size_mb"] = str(max_split // 2**20)
    values: dict[str, Any] = {}   # each as its key's parser reads torch's figure printed canonically
    for key, text in raw.items():
        parse = KEYS[key].parse
        assert parse is not None   # every key read back above is one AllocConf holds
        values[key] = parse(key, text)
    return AllocConf(**values)


def readable_keys(has_snapshot_settings: bool) -> frozenset[str]:
    """The keys a native allocator lets us read back: on every version, and where a snapshot carries
    `allocator_settings`."""
    ways = {Readback.ALWAYS, Readback.SNAPSHOT} if has_snapshot_settings else {Readback.ALWAYS}
    return frozenset(key.name for key in KEYS.values() if key.readback in ways)


def mismatch(asked: AllocConf, effective: AllocConf, readable: frozenset) -> str | None:
    """A reason when a key that this torch lets us read back differs from what was asked; None when all agree."""
    checked = ["backend"] if asked.is_async else [f.name for f in fields(AllocConf) if f.name in KEYS
                                                  and KEYS[f.name].readback is not None]
    problems = []
    for name in checked:
        want, got = _in_force(asked, name), _in_force(effective, name)
        if name in readable and want != got:
            problems.append(f"{name}: {want} asked, {got} in force")
    return "allocator settings did not take effect: " + "; ".join(problems) if problems else None


def _in_force(conf: AllocConf, name: str) -> object:
    value = getattr(conf, name)
    return KEYS[name].default if value is None else value
