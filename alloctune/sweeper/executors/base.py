"""The executor interface: run a round of planned trials and stream each finished one back."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ...results.records import TrialRecord
from ...trial.task import TrialTask

# Called on the sweeper's thread as each trial finishes, so the record is stored before the next one arrives.
OnDone = Callable[[TrialTask, TrialRecord], None]
# Called for a planned trial this executor cannot run at all (e.g. the simulator and cudaMallocAsync), with why.
OnSkip = Callable[[TrialTask, str], None]


class Executor:
    """Runs trials somewhere. `run` may be called once per round of a sweep; `close` releases what the executor
    holds (a cluster connection...). Usable as a context manager."""

    def run(self, tasks: Sequence[TrialTask], on_done: OnDone, on_skip: OnSkip) -> None:
        """Run `tasks` (ideally in the order given), calling `on_done` once per finished trial and `on_skip` once
        per trial that cannot run here. Returns when all are done. On an interrupt (Ctrl-C) it stops the trials
        in flight, which are then not reported (a resumed sweep runs them again), and re-raises."""
        raise NotImplementedError

    def call(self, fn: Callable, *args) -> Any:
        """`fn(*args)` where this executor's trials run: the sweeper probes interpreters and GPUs through it."""
        return fn(*args)

    def close(self) -> None:
        pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
