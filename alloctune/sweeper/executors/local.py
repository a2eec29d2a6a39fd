"""Trials as fresh child processes on this machine, one at a time per GPU (see trial/launch.py)."""
from __future__ import annotations

from typing import Sequence

from ...trial.launch import run_trials
from ...trial.task import TrialTask
from .base import Executor, OnDone, OnSkip


class LocalExecutor(Executor):
    def __init__(self, gpus: Sequence[int | Sequence[int] | None]):  # a tuple: one trial's set of GPUs
        self.gpus = list(gpus)

    def run(self, tasks: Sequence[TrialTask], on_done: OnDone, on_skip: OnSkip) -> None:
        run_trials(tasks, self.gpus, on_done)
