"""Trials as replays of one recorded allocation trace through the simulator: no GPU, no child process.

Each planned trial is one setting under one interpreter's torch (whose version decides where allocator
behaviour differs); settings the simulator cannot model (cudaMallocAsync, a value it refuses) are skipped with
the reason. The records carry peaks only: replay has no clock.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from ...results.records import Backend, TrialRecord, TrialState
from ...settings.versions import simulation_note
from ...sim.replay import DEFAULT_DEVICE_MEMORY
from ...trial.task import TrialTask
from ...units import budget_on
from .base import Executor, OnDone, OnSkip


class SimExecutor(Executor):
    def __init__(self, trace, trace_path: str, torch_versions: dict[str, str], notice=lambda _: None):
        """`torch_versions`: the torch each task's env_id simulates. `trace`: a loaded `sim.trace.Trace`."""
        self.trace, self.trace_path, self.torch_versions, self.notice = trace, trace_path, torch_versions, notice
        self.device_memory = int(trace.meta.get("device_total_bytes") or DEFAULT_DEVICE_MEMORY)

    def budget_bytes(self, budget_bytes: int | None, budget_fraction: float | None) -> int | None:
        """The budget in bytes on the simulated card (a fraction is of the recording's device)."""
        return budget_on(budget_bytes, budget_fraction, self.device_memory)

    def run(self, tasks: Sequence[TrialTask], on_done: OnDone, on_skip: OnSkip) -> None:
        from ...sim.replay import replay
        from ...sim.simulate import core_notice

        if note := core_notice():
            self.notice(note)
        groups: dict[tuple, list[TrialTask]] = {}  # one replay per interpreter and budget
        for task in tasks:
            groups.setdefault((task.env_id, task.budget_bytes), []).append(task)
        meta, noted = self.trace.meta, set()
        for (env_id, budget), group in groups.items():
            version = self.torch_versions[env_id]
            if version not in noted and (note := simulation_note(version)):
                self.notice(note)
            noted.add(version)
            # gpu_memory: the simulated card's, which the reports' whole-card rule and device lines read
            env = dict(meta.get("env") or {}, trace=self.trace_path, trace_torch=meta.get("torch_version"),
                       simulated_as=version, gpu_memory=self.device_memory)
            outcomes = replay(self.trace, [t.conf for t in group], self.device_memory, budget_bytes=budget,
                              torch_version=version)
            for task, outcome in zip(group, outcomes):  # skips first: they change the count of trials to come
                if not outcome.simulated:
                    on_skip(task, f"cannot be simulated: {outcome.reason}")
            for task, outcome in zip(group, outcomes):
                if outcome.simulated:
                    on_done(task, _record(task, outcome, env))

def _record(task: TrialTask, outcome, env: dict) -> TrialRecord:
    m = outcome.measurement()
    return TrialRecord(
        workload=task.workload["name"], workload_hash=task.workload_hash, conf=str(task.conf), repeat=task.repeat,
        env_id=task.env_id, backend=Backend.SIM, state=TrialState.OOM if m.num_ooms else TrialState.OK, measurement=m,
        budget_bytes=task.budget_bytes, env=env, started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        error=f"simulated OOM at trace event {outcome.result.first_oom_index}" if m.num_ooms else None)
