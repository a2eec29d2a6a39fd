"""Trials as Ray tasks across a cluster (`alloctune sweep --executor ray`; `pip install 'alloctune[ray]'`).

Each trial is one Ray task that asks Ray for its GPUs (`num_gpus`); on its node the task runs the same fresh child
process as the local runner (`runner.run_trial`), under the CUDA_VISIBLE_DEVICES that Ray assigned, and returns the
record as JSON. The driver streams records back to the sweeper, which alone writes the trials file.

- alloctune itself travels with the job (Ray `py_modules`); every node needs Ray, and the interpreter and torch
  the sweep runs trials with (`--python`, default: the driver's own path) at the same path.
- The interpreter is probed by a Ray task on a GPU node, and all trials then ask for that node's GPU model (Ray's
  `accelerator_type`, where the cluster declares one; or the model asked for), so one sweep never mixes models.
- A lost node or a killed worker (the child never reported back) is retried once; lost twice, it is a `crashed`
  trial with the reason. Ray's own retries are off, so each loss is seen and said.
- Ctrl-C cancels the tasks in flight; a cancelled task kills its trial child before it ends.

Ray is imported only here, and only when this executor is used.
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ...errors import AlloctuneError, OptionError, OptionText
from ...results.records import TrialRecord
from ...trial.launch import lost_trial, run_trial, stop_children
from ...trial.task import TrialTask
from ...units import plural
from .base import Executor, OnDone, OnSkip

PACKAGE_DIR = str(Path(__file__).resolve().parents[2])  # alloctune/, shipped to the nodes with the job
CANCEL_GRACE_S = 10.0  # how long Ctrl-C waits for cancelled tasks to kill their children
CONNECT_TIMEOUT_S = 5.0   # for a cluster's address to answer at all; Ray itself retries for minutes


def _answers(address: str | None) -> None:
    """A cluster address (host:6379, ray://host:10001) where nothing answers is refused in seconds, in one line:
    ray.init would retry it 60 times, for some 14 minutes. Ray's own words ('auto', 'local') and None are its own
    rules, as is an address without a port."""
    host, colon, port = (address or "").removeprefix("ray://").rpartition(":")
    if not (colon and host and port.isdigit()):
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, OverflowError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise AlloctuneError(f"cannot connect to the Ray cluster at {address}: {why} (nothing answered within "
                             f"{CONNECT_TIMEOUT_S:g} s: is the address right, and is 'ray start --head' running "
                             f"there?)") from None


class RayExecutor(Executor):
    def __init__(self, address: str | None = None, gpus_per_trial: int = 1, accelerator: str | None = None,
                 notice=lambda _: None):
        """`address`: a Ray cluster (ray://host:10001 or host:6379); None: RAY_ADDRESS, else the cluster that
        `ray start` runs on this machine, else a new local one (Ray's own rules). A Ray already initialized in
        this process (a test, a notebook) is used as it is, and left running: its workers must be able to import
        alloctune already. `accelerator`: the GPU model to sweep on (Ray's accelerator type, e.g. H100); None: that
        of the node where the interpreter is probed."""
        try:
            import ray
        except ImportError:
            raise OptionError("executor", "{executor} ray needs Ray on this machine and on the cluster's nodes: "
                              "pip install 'alloctune[ray]'") from None
        self._ray, self.gpus_per_trial, self.notice = ray, gpus_per_trial, notice
        self._owned = not ray.is_initialized()
        if self._owned:
            _answers(address or os.environ.get("RAY_ADDRESS"))
            try:
                ray.init(address=address, runtime_env={"py_modules": [PACKAGE_DIR]}, log_to_driver=False,
                         logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise AlloctuneError(f"cannot connect to the Ray cluster{f' at {address}' if address else ''}: "
                                     f"{exc}") from None
        resources = ray.cluster_resources()
        models = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
        problem = None
        if resources.get("GPU", 0) < gpus_per_trial:
            problem = (f"the Ray cluster has {plural(int(resources.get('GPU', 0)), 'GPU')} and each trial asks for "
                       f"{gpus_per_trial}: start its GPU nodes with 'ray start --address ...'")
        elif accelerator and accelerator not in models:
            problem = OptionText("{ray_accelerator} {accelerator}: the Ray cluster has {models}",
                                 accelerator=accelerator,
                                 models=", ".join(models) if models else "no GPU model it can name")
        if problem:  # said now: Ray would keep such tasks waiting forever
            self.close()
            raise AlloctuneError(problem)
        self._accelerator = accelerator  # the GPU model every trial asks for, once known

    def call(self, fn: Callable, *args) -> Any:
        """`fn(*args)` on a node where a trial would run (e.g. probing the interpreter and its GPUs there)."""
        ray = self._ray
        result, node_id = ray.get(self._options(_call_on_node, max_retries=1).remote(fn, *args))
        if self._accelerator is None:
            node: dict = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
            self._accelerator = next((k.split(":", 1)[1] for k in node.get("Resources", {})
                                      if k.startswith("accelerator_type:")), None)
        return result

    def run(self, tasks: Sequence[TrialTask], on_done: OnDone, on_skip: OnSkip) -> None:
        ray = self._ray
        pending: dict = {}  # ObjectRef -> (task, why its first attempt was lost, or None)
        cwd = os.getcwd()

        def submit(task: TrialTask, retried: str | None = None) -> None:
            pending[self._options(_trial_on_node, max_retries=0).remote(task, cwd)] = (task, retried)

        for task in tasks:  # Ray starts them in this order as GPUs free up: repeats stay interleaved
            submit(task)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                for ref in ready:
                    task, retried = pending.pop(ref)
                    try:
                        record = TrialRecord.from_json(ray.get(ref))
                    except ray.exceptions.RayTaskError as exc:  # our code raised on the node: no use retrying
                        cause = exc.cause or exc
                        record = lost_trial(task, f"the Ray task failed: {type(cause).__name__}: {_first_line(cause)}",
                                            retried=retried)
                    except ray.exceptions.RayError as exc:      # worker killed, node lost, ...
                        reason = f"{type(exc).__name__}: {_first_line(exc)}"
                        if retried is None:
                            self.notice(f"{task.conf.label} #{task.repeat + 1}: {reason}; retrying once")
                            submit(task, reason)
                            continue
                        record = lost_trial(task, f"lost twice on Ray; last: {reason}", retried=retried)
                    else:
                        record = replace(record, retried=retried)
                    on_done(task, record)
        except BaseException:
            # Ctrl-C: queued tasks are dropped, running ones get KeyboardInterrupt and kill their children.
            # Their trials are not recorded and run again when the sweep resumes.
            for ref in pending:
                ray.cancel(ref)
            ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_GRACE_S)
            raise

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()

    def _options(self, fn: Callable, max_retries: int):
        opts: dict = dict(num_gpus=self.gpus_per_trial, max_retries=max_retries)
        if self._accelerator:
            opts["accelerator_type"] = self._accelerator
        return self._ray.remote(fn).options(**opts)


# ---- on the node ------------------------------------------------------------------------------------------------

def _trial_on_node(task: TrialTask, cwd: str) -> dict:
    """One trial in a fresh child process, which inherits the CUDA_VISIBLE_DEVICES that Ray set for this task;
    the record names the GPUs Ray assigned (as Ray reports them) and the node. The trial starts in the driver's
    working directory where the node has it (a shared filesystem), as a local trial would."""
    import ray

    if os.path.isdir(cwd):
        os.chdir(cwd)
    try:
        record = run_trial(task)
    except BaseException:  # cancelled (Ctrl-C on the driver): the child runs in its own session, stop it too
        stop_children()
        raise
    return replace(record, node=record.node or socket.gethostname(),
                   gpus=",".join(map(str, ray.get_gpu_ids()))).to_json()


def _call_on_node(fn: Callable, *args) -> tuple:
    import ray

    return fn(*args), ray.get_runtime_context().get_node_id()


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0].rstrip(".") if lines else type(exc).__name__
