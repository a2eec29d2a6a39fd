"""The start-up hook's per-process report (`peaks.ProcessReport`) filled in at exit: the steps the process counted
(`with_steps`), and what the allocator and the driver saw on each device with the settings in force (`with_cuda`).
When the hook writes it, and what else it holds, is `hook/sitecustomize.py`'s.

Standard library and light alloctune modules only, torch as the caller hands it: the hook imports this inside the
user's processes, at exit.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..settings.conf import AllocConf
from ..settings.readback import mismatch
from .allocator import effective_settings
from .alternate import captured, finished
from .devices import Sampler, peaks
from .peaks import ProcessReport

if TYPE_CHECKING:   # a process that counted no step never loads the counter
    from .counting import Counter


def with_steps(counter: Counter, report: ProcessReport, sync: bool) -> ProcessReport:
    """`report` with the counted steps; `sync`: the end of their window after synchronising (the last step's
    host time is kept too, and is what the rate uses without a --steps window)."""
    synced = None
    if sync:
        try:
            synced = counter.job.synced()
        except Exception:   # a device in error: the host times still stand
            pass
    return replace(report, counted=counter.at_exit(synced), window_reserved=counter.window_reserved,
                   growth_samples=list(counter.growth_samples), alternation=finished(counter.alternation))


def with_cuda(torch: Any, report: ProcessReport, sampler: Sampler | None, conf: str,
              recording: bool, counter: Counter | None = None) -> tuple[ProcessReport, dict | None]:
    """`report` with what the allocator and the driver saw on each device (the last of `sampler`'s readings; of a
    process that alternated settings, `counter`'s alternation's figures at its first switch: its own setting's part
    of the run), and the settings in force against those asked for (`conf`); when `recording`, the allocator's
    snapshot too, taken once (expensive on a big job) for both the settings and the trace."""
    if sampler is not None:
        sampler.last()
    devices = captured(counter) or peaks(torch.cuda, sampler)
    snapshot = torch.cuda.memory._snapshot() if recording else None
    effective, readable = effective_settings(snapshot)
    return replace(report, devices=devices, effective_conf=str(effective),
                   mismatch=mismatch(AllocConf.parse(conf), effective, readable),
                   device_total_bytes=torch.cuda.get_device_properties(0).total_memory), snapshot
