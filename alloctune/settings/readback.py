"""What the allocator reports back about its settings: a snapshot's `allocator_settings` as a setting string,
and whether the setting in force is the one asked for (the trial child and the start-up hook check it)."""
from __future__ import annotations

from .conf import AllocConf


def conf_from_settings(settings: dict | None, max_split: int) -> str:
    """The setting string for a snapshot's `allocator_settings` and memory_stats' `max_split_size` (bytes)."""
    parts: dict[str, str] = {}
    if isinstance(settings, dict):
        if settings.get("expandable_segments"):
            parts["expandable_segments"] = "True"
        if settings.get("garbage_collection_threshold"):
            parts["garbage_collection_threshold"] = f"{settings['garbage_collection_threshold']:g}"
        divisions = settings.get("roundup_power2_divisions") or []
        # A dict keyed by interval start in MiB ('1', '2', '4', ...) on recent versions, a list on older ones.
        divisions = [d for d in (divisions.values() if isinstance(divisions, dict) else divisions)
                     if isinstance(d, int) and d > 1]
        if divisions and len(set(divisions)) == 1:
            parts["roundup_power2_divisions"] = str(divisions[0])
    if 0 < max_split < 2**62:
        parts["max_split_size_mb"] = str(max_split // 2**20)
    return ",".join(f"{k}:{v}" for k, v in sorted(parts.items()))


def mismatch(asked: str, effective: str, readable: frozenset) -> str | None:
    """A reason when a key that this torch lets us read back differs from what was asked; None when all agree."""
    want, got = AllocConf.parse(asked), AllocConf.parse(effective)
    checks = {
        "backend": (want.backend or "native", got.backend or "native"),
        "expandable_segments": (bool(want.expandable_segments), bool(got.expandable_segments)),
        "max_split_size_mb": (want.max_split_size_mb, got.max_split_size_mb),
        "garbage_collection_threshold": (want.garbage_collection_threshold, got.garbage_collection_threshold),
    }
    if want.is_async:
        checks = {"backend": checks["backend"]}
    problems = [f"{key}: {w} asked, {g} in force" for key, (w, g) in checks.items() if key in readable and w != g]
    return "allocator settings did not take effect: " + "; ".join(problems) if problems else None
