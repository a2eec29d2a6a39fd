"""Where trials run. The sweeper plans `TrialTask`s; an executor runs them and hands back one `TrialRecord` each.

    base.py   the `Executor` interface the sweeper plans against
    local.py  `LocalExecutor`: fresh child processes on this machine, one trial per GPU (trial/launch.py)
    sim.py    `SimExecutor`: replays of a recorded allocation trace through the simulator (`sim/`)
    ray.py    `RayExecutor`: the local runner's child processes as Ray tasks across a cluster (imported on use:
              Ray is an optional extra)

Only the sweeper writes the trials file: executors return records, they never store them.
"""
from .base import Executor, OnDone, OnSkip
from .local import LocalExecutor
from .sim import SimExecutor

__all__ = ["Executor", "LocalExecutor", "OnDone", "OnSkip", "SimExecutor"]
