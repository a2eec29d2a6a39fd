"""What one trial is (`TrialTask`: workload, setting, repeat, interpreter) and the environment its process gets
(`child_environment`): the setting under the variable torch reads, set before anything in the process starts."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..files import read_tail
from ..results.records import Backend, trial_key
from ..runtime.stopping import MIN_STEADY_STEPS
from ..settings.conf import AllocConf
from ..settings.known import ALLOC_CONF_VARS
from ..workload.spec import DEFAULT_TIMEOUT_S

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # what a child needs on PYTHONPATH
# The variables alloctune sets (or removes) in a child's environment itself: `child_environment`'s here, and the
# start-up hook's, all named OWN_PREFIX... (command.hook_environment, command.run_command). A value a user gives
# the child through one of them never reaches it (`set_by_alloctune`).
SET_VARIABLES = ("PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", *ALLOC_CONF_VARS)
OWN_PREFIX = "ALLOCTUNE_"


def set_by_alloctune(name: str) -> bool:
    """Whether alloctune sets the variable `name` in a child's environment itself (so a user's value is lost)."""
    return name in SET_VARIABLES or name.startswith(OWN_PREFIX)


@dataclass(frozen=True)
class TrialTask:
    """One trial to run: what (workload, setting, repeat) and where (interpreter, environment id)."""

    workload: dict             # WorkloadSpec.to_dict()
    workload_hash: str
    conf: AllocConf
    repeat: int
    python: str
    env_id: str
    budget_bytes: int | None = None
    budget_fraction: float | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    record_trace: str | None = None   # path: record the allocation trace of this run as a snapshot pickle
    backend: Backend = Backend.CUDA   # what its record will say: CUDA (measured) or SIM (replayed)
    check_growth: int | None = None   # a command's growth check: sample memory at steps K and 2K (--check-growth)
    early_stop: bool = False          # a confirmation: end it after the warm-up and enough steps (runtime/stopping.py)
    # A confirmation's step in which the replay of its setting reached peak reserved (0: unknown): its automatic
    # window and its alternation end after it, so that the memory it measures covers the peak (runtime/counting.py)
    peak_step: int = 0
    # An in-process confirmation of a command: its setting and the default in turn, in blocks of steps, in one
    # process (runtime/alternate.AlternatePlan as ALLOCTUNE_HOOK_ALTERNATE's JSON); None: a plain trial.
    alternate: str | None = None

    @property
    def warmup_steps(self) -> int:
        """The workload's warm-up steps (0 where it names none)."""
        return int(self.workload.get("warmup_steps") or 0)

    @property
    def held_past_window(self) -> bool:
        """A confirmation that its replayed peak (`peak_step`) keeps running past the automatic window's earliest
        end (`stopping.MIN_STEADY_STEPS` steady steps after the warm-up)."""
        return self.early_stop and self.peak_step > self.warmup_steps + MIN_STEADY_STEPS

    def key(self) -> tuple:
        """The key its record will have (`TrialRecord.key`): a resumed sweep skips tasks already recorded."""
        return trial_key(self.workload_hash, str(self.conf), self.env_id, self.backend, self.budget_bytes,
                         self.repeat, self.extra)

    @property
    def extra(self) -> bool:
        """A command's recording trial: recording covers the whole run, so it is not the default's repeat 0."""
        return self.record_trace is not None and bool(self.workload.get("command"))


def child_environment(conf: AllocConf, gpu: int | Sequence[int] | None, base: dict | None = None) -> dict:
    """The child's environment: our package importable, the setting under the variable every torch ≥ 2.1 reads
    first (a stray PYTORCH_ALLOC_CONF from the user's shell is removed so it cannot leak into the default)."""
    env = dict(os.environ if base is None else base)
    for var in ALLOC_CONF_VARS:
        env.pop(var, None)
    if not conf.is_default:
        env["PYTORCH_CUDA_ALLOC_CONF"] = str(conf)
    if gpu is not None:
        # --gpus indexes the devices this process sees: respect a CUDA_VISIBLE_DEVICES the user already set.
        # A trial given several GPUs (--gpus-per-trial) sees all of them.
        visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[g] if g < len(visible) else str(g)
                                               for g in ([gpu] if isinstance(gpu, int) else gpu))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def identity_fields(task: TrialTask) -> dict:
    """The record fields that say which trial this is."""
    return dict(workload=task.workload["name"], workload_hash=task.workload_hash, conf=str(task.conf),
                repeat=task.repeat, env_id=task.env_id, backend=task.backend, budget_bytes=task.budget_bytes,
                recording=task.record_trace is not None, extra=task.extra)


def exit_reason(code: int | None, who: str, exited: str = "") -> str:
    """How process `who` ended: killed by a signal (a negative return code), or its exit status then `exited`."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} was killed by {name}"
    return f"{who} exited with status {code}{exited}"




STDERR_LINES = 25           # of a failed trial's stderr, kept in its record
_STDERR_TAIL_BYTES = 64 * 1024   # read from the end of the file a trial's stderr went to: a job may print gigabytes


def stderr_tail(path: str, lines: int = STDERR_LINES) -> str:
    """The last `lines` lines of the file a trial's stderr went to ('' where there is none)."""
    try:
        text = read_tail(path, _STDERR_TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
