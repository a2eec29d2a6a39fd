"""Replay the run that ended in an OOM under other settings: would it have fit, and at what peak? The requests
replayed are the snapshot's as every replaying command reads them (`sim/rebuilt.py`: the state at the trace's
start rebuilt where it starts mid-run, the window, then the request that failed); under the setting the run used,
the replay should fail at that request, and whether it does is the check of the reconstruction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..settings.conf import AllocConf
from ..sim.rebuilt import Reconstruction
from ..sim.replay import ReplayOutcome, replay
from ..sim.trace import ALLOC, Trace
from ..units import format_bytes


@dataclass(frozen=True)
class WindowReplay:
    reconstruction: Reconstruction
    recorded_conf: str
    reproduced: bool | None      # the recorded setting's replay fails at the failed request (None: not simulated)
    outcomes: list[ReplayOutcome]
    confidence: str              # 'high', 'medium' or 'low'
    confidence_reason: str

    @property
    def fitting(self) -> list[ReplayOutcome]:
        """Settings that would have avoided the OOM, lowest peak reserved first."""
        return sorted((o for o in self.outcomes if o.fits), key=lambda o: o.sort_key())

    def to_json(self) -> dict:
        r = self.reconstruction
        return {"recorded_conf": self.recorded_conf, "reproduced": self.reproduced, "confidence": self.confidence,
                "confidence_reason": self.confidence_reason, "window_events": r.window_events,
                "whole_run": r.whole_run, "start_segments": r.start_segments,
                "start_live_blocks": r.start_live_blocks, "start_live_bytes": r.start_live_bytes,
                "start_reserved_bytes": r.start_reserved, "outcomes": [o.to_json() for o in self.outcomes]}


def replay_window(recon: Reconstruction, trace: Trace, recorded_conf: AllocConf, candidates: list[AllocConf],
                  device_memory: int, overhead: int, budget: int | None, torch_version: str | None,
                  jobs: int | None = None) -> WindowReplay:
    confs = [recorded_conf, *(c for c in candidates if c.label != recorded_conf.label)]
    outcomes = replay(trace, confs, device_memory, budget_bytes=budget, overhead_bytes=overhead, jobs=jobs,
                      torch_version=torch_version)
    recorded, others = outcomes[0], outcomes[1:]
    last = int(np.flatnonzero(np.asarray(trace.kinds) == ALLOC)[-1])   # the failed request
    reproduced = None if recorded.result is None else recorded.result.first_oom_index == last
    fb = format_bytes
    if reproduced is False:
        how = ("fits" if recorded.fits else f"fails earlier, at event {recorded.result.first_oom_index} of "
               f"{len(trace)}") if recorded.result else ""
        confidence, reason = "low", (f"replaying the recorded setting ({recorded.conf}) from the rebuilt state "
                                     f"{how} instead of failing at the request: the rebuilt start state or the "
                                     "simulation differs from the run, so the answers below are not reliable")
    elif recon.whole_run:
        confidence, reason = "high", ("the trace covers the whole run and its replay under the recorded setting "
                                      "fails at the same request")
    else:
        confidence, reason = "medium", (
            f"the trace holds the last {recon.window_events} events only; the start state was rebuilt from the "
            f"segments ({recon.start_segments} segment(s), {fb(recon.start_reserved)} reserved, "
            f"{recon.start_live_blocks} live block(s), {fb(recon.start_live_bytes)}) and reproduces the OOM under "
            "the recorded setting; under another setting the run would have reached a different state before "
            "the window, which no trace of this run shows")
    return WindowReplay(recon, recorded.conf, reproduced, [recorded, *others], confidence, reason)
