"""Trials as replays of recorded allocation traces through the simulator: no GPU, no child process.

Each planned trial is one setting under one interpreter's `Target` (the torch whose allocator the replay follows:
the interpreter's where it runs the job, else the trace's, sim/target.py); settings the simulator cannot model
(cudaMallocAsync, a value it refuses) are skipped with the reason. The records carry peaks only: replay has no
clock. A command of several processes leaves one trace per process (rank): each is replayed, and the trial is the
job's: a row per process (`TrialRecord.processes`), the figures of the one that peaks highest (`peak_row`: a
measured trial takes each peak's highest on its own), retries and OOMs summed.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Sequence

from ...results.records import Backend, TrialRecord, TrialState, peak_row, process_name, process_row
from ...sim.limits import DEFAULT_DEVICE_MEMORY
from ...sim.replay import ReplayOutcome
from ...sim.target import Target
from ...trial.task import TrialTask
from .base import Executor, OnDone, OnSkip


class SimExecutor(Executor):
    def __init__(self, traces, trace_paths: list[str], targets: dict[str, Target], notice=lambda _: None):
        """`targets`: the torch each task's env_id simulates. `traces`: loaded `sim.trace.Trace`s, one per process
        of the job (by rank), and where each was read from; the first's recording gives the card."""
        self.traces, self.trace_paths, self.targets, self.notice = traces, trace_paths, targets, notice
        self.device_memory = int(traces[0].meta.get("device_total_bytes") or DEFAULT_DEVICE_MEMORY)

    def run(self, tasks: Sequence[TrialTask], on_done: OnDone, on_skip: OnSkip) -> None:
        from ...sim.replay import replay
        from ...sim.simulate import core_notice

        if note := core_notice():
            self.notice(note)
        groups: dict[tuple, list[TrialTask]] = {}  # one replay per interpreter and budget
        for task in tasks:
            groups.setdefault((task.env_id, task.budget_bytes), []).append(task)
        meta, noted = self.traces[0].meta, set()
        for (env_id, budget), group in groups.items():
            target = self.targets[env_id]
            for note in target.warnings():   # once each, however many interpreters and budgets
                if note not in noted:
                    self.notice(note)
                    noted.add(note)
            version = target.followed
            # gpu_memory: the simulated card's, which the reports' whole-card rule and device lines read
            env = dict(meta.get("env") or {}, trace=self.trace_paths[0] if len(self.trace_paths) == 1
                       else self.trace_paths, trace_torch=meta.get("torch_version"), simulated_as=version,
                       gpu_memory=self.device_memory)
            if "dry_run" in meta:   # the trace is a dry run's: every report says so (results/provenance.py)
                env["dry_run"] = meta["dry_run"]
            per_trace = [replay(trace, [t.conf for t in group], self.device_memory, budget_bytes=budget,
                                torch_version=version) for trace in self.traces]
            outcomes = list(zip(*per_trace))   # per task: its setting's outcome on each trace
            for task, each in zip(group, outcomes):  # skips first: they change the count of trials to come
                if not each[0].simulated:
                    on_skip(task, f"cannot be simulated: {each[0].reason}")
            for task, each in zip(group, outcomes):
                if each[0].simulated:
                    on_done(task, _record(task, list(each), self.traces, env))


def _record(task: TrialTask, outcomes: list[ReplayOutcome], traces: list, env: dict) -> TrialRecord:
    """The trial of one setting replayed on each trace: with several, a row per trace (process) and the peaks of
    the one that peaks highest."""
    measured = [m for o in outcomes if (m := o.measurement()) is not None]   # all simulated: one per trace
    rows = [process_row(t.meta.get("pid"), t.meta.get("rank"), t.device, m) for t, m in zip(traces, measured)]
    top = peak_row(rows)
    assert top is not None   # a row per trace, and there is one at least
    m = replace(measured[rows.index(top)], num_alloc_retries=sum(x.num_alloc_retries for x in measured),
                num_ooms=sum(x.num_ooms for x in measured))
    oom = next((i for i, x in enumerate(measured) if x.num_ooms), None)
    where = "" if oom is None or len(rows) == 1 else f" of {process_name(rows[oom])}"
    first = outcomes[oom].result if oom is not None else None
    # stored with the trial: folders written before say "simulated OOM", which is shown as it is
    error = f"OOM in the replay at trace event {first.first_oom_index}{where}" if first else None
    return TrialRecord(
        workload=task.workload["name"], workload_hash=task.workload_hash, conf=str(task.conf), repeat=task.repeat,
        env_id=task.env_id, backend=Backend.SIM, state=TrialState.OOM if m.num_ooms else TrialState.OK, measurement=m,
        budget_bytes=task.budget_bytes, env=env, started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        error=error, processes=rows if len(rows) > 1 else None)

