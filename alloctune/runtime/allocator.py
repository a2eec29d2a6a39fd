"""The caching allocator of this process as torch reports it: the settings in force. Read by the trial child and
by the start-up hook (each checks them against the setting asked for, `settings.readback.mismatch`)."""
from __future__ import annotations

from ..settings.conf import AllocConf
from ..settings.readback import conf_from_settings, readable_keys


def effective_settings(snapshot: dict | None = None) -> tuple[AllocConf, frozenset]:
    """The allocator settings in force, as this torch reports them (call after the allocator started), and the
    keys it could read back (each key's `readback` in `settings/keys.py`: memory_stats and the backend on every
    version, the snapshot's `allocator_settings` on recent ones). `snapshot`: a `torch.cuda.memory._snapshot()`
    the caller has just taken (a recording process's trace at exit), read instead of taking another: on a big job
    each one is expensive."""
    import torch

    backend = torch.cuda.get_allocator_backend()
    if backend != "native":
        return AllocConf(backend=backend), frozenset({"backend"})
    try:
        settings = (snapshot if snapshot is not None else torch.cuda.memory._snapshot()).get("allocator_settings")
    except Exception:
        settings = None
    effective = conf_from_settings(settings, torch.cuda.memory_stats().get("max_split_size", -1))
    return effective, readable_keys(isinstance(settings, dict))
