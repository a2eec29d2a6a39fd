"""The caching allocator of this process as torch reports it: the settings in force. Read by the trial child and
by the start-up hook (each checks them against the setting asked for, `settings.readback.mismatch`)."""
from __future__ import annotations

from ..settings.readback import conf_from_settings


def effective_settings() -> tuple[str, frozenset]:
    """The allocator settings in force, as this torch reports them (call after the allocator started), and the
    keys it could read back.

    The backend and max_split_size (memory_stats) read back on every version; expandable_segments, GC threshold
    and divisions only where the snapshot carries `allocator_settings` (recent versions)."""
    import torch

    backend = torch.cuda.get_allocator_backend()
    if backend != "native":
        return f"backend:{backend}", frozenset({"backend"})
    readable = {"backend", "max_split_size_mb"}
    try:
        settings = torch.cuda.memory._snapshot().get("allocator_settings")
    except Exception:
        settings = None
    if isinstance(settings, dict):
        readable |= {"expandable_segments", "garbage_collection_threshold"}
    return conf_from_settings(settings, torch.cuda.memory_stats().get("max_split_size", -1)), frozenset(readable)
