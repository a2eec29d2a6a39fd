"""What a sweep is asked to do (`SweepOptions`, every check of it in this module) and what it tells its caller as
it goes (`SweepCallbacks`). A bad option is an `OptionError` naming its field: `max_repeats must be a whole number
from 3 to 1000, got 1`; the CLI names the flag instead (cli/sweep.py maps fields to flags)."""
from __future__ import annotations

import enum
import math
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..decide.parameters import DEFAULT_MAX_SLOWDOWN, check_max_slowdown
from ..decide.rounds import DEFAULT_MAX_REPEATS, MAX_REPEATS, MIN_ROUNDS
from ..errors import OptionError, shown
from ..results.folder import DEFAULT_RESULTS_ROOT
from ..results.records import Backend, TrialRecord
from ..units import MAX_INT, MAX_INT_TEXT, parse_budget
from ..workload.command import CommandSpec, check_steps, is_python, target_python
from ..workload.spec import MAX_TIMEOUT_S, WorkloadSpec, warmup_steps_or_default

AUTO_REPEATS = "auto"   # `repeats`: rounds until each setting's answer is known (decide/rounds.py)
# `repeats`, the default: a hybrid sweep predicts each setting's speed by replay and confirms the winner in one pair,
# with rounds only where the prediction cannot answer (decide/confirm.py); a sweep that replays nothing: 'auto'
CONFIRM_REPEATS = "confirm"
HYBRID_FINALISTS = 3    # `finalists`: the best simulated settings a hybrid sweep measures beside the default


class ExecutorKind(str, enum.Enum):
    """Where measured trials run, and interpreters are probed."""

    LOCAL = "local"   # child processes on this machine's GPUs
    RAY = "ray"       # one Ray task per trial across a cluster (executors/ray.py)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SweepOptions:
    """Everything a sweep is asked, checked as a whole when made. Only what needs the workload (`targets`; a
    command's options, as its workload is made: api/sweep.py) or the probed interpreters (plan.py) is checked later.
    Sequences are held as tuples; names as their enums."""

    preset: str | None = None               # the workload's preset (default: the file's default_preset)
    grid: Sequence | None = None            # grid entries to sweep instead of the workload's grid or the default
    repeats: int | str = CONFIRM_REPEATS    # trials per setting, 'auto' or 'confirm'
    max_repeats: int = DEFAULT_MAX_REPEATS  # with 'auto': the most rounds
    time_budget_s: float | None = None      # with 'auto': start no round that would end after this much measuring
    gpus: Sequence[int] | None = None       # this machine's GPUs (default: 0)
    gpus_per_trial: int = 1                 # a disjoint set of this many GPUs for each trial running at once
    budget: str | None = None               # memory budget per trial: a size ('24GiB') or a fraction ('0.5')
    pythons: Sequence[str] | None = None    # interpreters to run trials with (default: this one, or the command's)
    backend: Backend = Backend.AUTO
    executor: ExecutorKind = ExecutorKind.LOCAL
    ray_address: str | None = None          # with executor ray: the cluster (default: Ray's own rules)
    ray_accelerator: str | None = None      # with executor ray: the GPU model (default: the probed node's)
    trace: str | None = None                # the trace to replay (default: the workload's; hybrid: recorded)
    search: int | None = None               # search this many settings by replay instead of sweeping the grid
    finalists: int = HYBRID_FINALISTS       # hybrid: the best simulated settings measured beside the default
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN
    timeout_s: float | None = None          # per trial (default: the workload's, else DEFAULT_TIMEOUT_S)
    results_root: str | os.PathLike = DEFAULT_RESULTS_ROOT
    out: str | os.PathLike | None = None    # this exact results folder, resumed when it holds the same sweep
    fresh: bool = False                     # a new results folder even where one holds the same sweep
    started_as: str | None = None           # how the sweep was started, for sweep.json (default: the Python call)
    check_growth: int | None = None         # a command's growth check: memory sampled at steps K and 2K
    dry_run: bool = False                   # a command traced without a GPU (dryrun/) instead of recorded, replayed
    arch: str | None = None                 # with dry_run: the card it stands for (default: trial/recording's)
    # How a command is run and measured (workload/command.py checks them; a workload file gives its own)
    metric_regex: str | None = None         # the throughput read from its output: the number in group 1 or 'value'
    unit: str | None = None                 # what the throughput counts, or what one step is worth: '32 samples'
    warmup_steps: int | None = None         # steps left out of the throughput (default: DEFAULT_WARMUP_STEPS)
    steps: int = 0                          # end each trial after this many steps past the warm-up (0: its own end)
    step_on: str | None = None              # steps counted as calls of 'forward', or returns of 'module:qualname'
    name: str | None = None                 # the results folder's stem (default: cmd-<script name>)
    cwd: str | os.PathLike | None = None    # the folder it runs in (default: the current one)
    isolate_cwd: bool = False               # each trial in an empty folder of its own

    def __post_init__(self) -> None:
        for name, kind in (("backend", Backend), ("executor", ExecutorKind)):
            object.__setattr__(self, name, _member(name, kind, getattr(self, name)))
        for name in ("grid", "gpus", "pythons"):
            if (value := getattr(self, name)) is not None:
                object.__setattr__(self, name, tuple(value) if isinstance(value, (list, tuple)) else (value,))
        self._check_rounds()
        self._check_limits()
        self._check_where()
        self._check_paths()
        self._check_command()
        if self.budget is not None:
            parse_budget(self.budget)   # a SizeError saying what a budget is

    @property
    def auto(self) -> bool:
        """Rounds where an answer needs them: 'auto', and 'confirm' (which runs as 'auto' where nothing replays)."""
        return self.repeats in (AUTO_REPEATS, CONFIRM_REPEATS)

    @property
    def confirm(self) -> bool:
        return self.repeats == CONFIRM_REPEATS

    @property
    def rounds(self) -> int:
        """Fixed repeats, or with 'auto' the most rounds."""
        return self.max_repeats if self.auto else int(self.repeats)

    @property
    def budget_limit(self) -> tuple[int | None, float | None]:
        """(bytes, None) or (None, fraction of the device); (None, None) without a budget."""
        return parse_budget(self.budget) if self.budget else (None, None)

    def targets(self, spec: WorkloadSpec) -> tuple[list[str], Backend]:
        """The interpreters to probe (and, for a command that starts with Python, to run it with) and the backend
        asked for: a command is measured on the GPU (cuda), or planned by replay and its finalists measured
        (hybrid, what auto means for a command)."""
        if spec.command is None:
            if self.dry_run:
                raise OptionError("dry_run", "{dry_run} traces your own program: sweep it as -- COMMAND ...")
            if self.check_growth is not None:
                raise OptionError("check_growth", "{check_growth} samples the memory of a command's own steps "
                                  "(the start-up hook counts them): sweep it as -- COMMAND ...")
            return list(self.pythons or [sys.executable]), self.backend
        command = CommandSpec.from_dict(spec.command)
        if self.dry_run:   # no GPU trial: the dry run stands for the recording one, and every setting is replayed
            return list(self.pythons or [target_python(command)]), Backend.SIM
        if self.backend == Backend.SIM:
            from ..trial.recording import DRY_RUN_INSTEAD   # here: the parser imports this module at start-up

            raise OptionError("backend", "{backend} {got}: a command is measured on the GPU ({backend} {cuda} or "
                              "{hybrid}); to judge it by replay alone, " + DRY_RUN_INSTEAD, got=self.backend,
                              cuda=Backend.CUDA, hybrid=Backend.HYBRID)
        if self.pythons and not is_python(command.argv[0]):
            raise OptionError("pythons", "{pythons} applies to a command that starts with a Python interpreter, "
                              "and {program} is not one", program=os.path.basename(command.argv[0]))
        return list(self.pythons or [target_python(command)]), self._command_backend()

    def _command_backend(self) -> Backend:
        """cuda or hybrid as asked; auto: hybrid (one extra trial records the trace, replay predicts every native
        setting's memory exactly, and memory-first rounds measure only what can win), except on a Ray cluster
        without a trace, where the recording trial cannot run (it runs on this machine's GPU): cuda."""
        if self.backend == Backend.AUTO:
            return Backend.HYBRID if self.executor == ExecutorKind.LOCAL or self.trace else Backend.CUDA
        return self.backend

    def _check_rounds(self) -> None:
        if not self.auto and not (_whole(self.repeats) and 1 <= int(self.repeats) <= MAX_REPEATS):
            raise OptionError("repeats", "{repeats} must be 'confirm', 'auto' or a whole number from 1 to {most}, "
                              "got {got!r}",
                              most=MAX_REPEATS, got=self.repeats)
        if self.auto:
            _at_least("max_repeats", self.max_repeats, MIN_ROUNDS, MAX_REPEATS)
        if self.time_budget_s is not None and not (_finite(self.time_budget_s) and self.time_budget_s > 0):
            raise OptionError("time_budget_s", "{time_budget_s} must be a positive, finite number of seconds, got "
                              "{got}", got=self.time_budget_s)

    def _check_limits(self) -> None:
        check_max_slowdown(self.max_slowdown)
        check_timeout(self.timeout_s)
        for name in ("search", "finalists", "check_growth"):
            if getattr(self, name) is not None:
                _at_least(name, getattr(self, name), 1)
        if self.gpus is not None:
            check_gpus(self.gpus)

    def _check_paths(self) -> None:
        """A folder or file named by a path: '' would be the current folder, written into as a results folder."""
        for name in ("results_root", "out", "trace", "cwd"):
            value = getattr(self, name)
            text = os.fspath(value) if isinstance(value, os.PathLike) else value
            if value is not None and (not isinstance(text, str) or not text or "\0" in text):
                raise OptionError(name, "{%s} must be a non-empty path, got {got}" % name, got=shown(value))

    def _check_command(self) -> None:
        """A command's options of the types workload/command.py reads (it checks their values), and its window."""
        check_steps(warmup_steps_or_default(self.warmup_steps), self.steps)
        for name in ("metric_regex", "unit"):
            if not isinstance(getattr(self, name), (str, type(None))):
                raise OptionError(name, "{%s}: expected a str, got {got}" % name, got=shown(getattr(self, name)))
        if not isinstance(self.isolate_cwd, bool):
            raise OptionError("isolate_cwd", "{isolate_cwd}: expected True or False, got {got}",
                              got=shown(self.isolate_cwd))

    def _check_where(self) -> None:
        """Which backend and executor go with which other options."""
        self._check_dry_run()
        if self.search is not None and self.backend == Backend.CUDA:
            raise OptionError("search", "{search} replays a trace: use it with {backend} {sim} or {hybrid}",
                              sim=Backend.SIM, hybrid=Backend.HYBRID)
        ray = ExecutorKind.RAY
        if self.executor == ExecutorKind.LOCAL:
            if self.ray_address or self.ray_accelerator:
                raise OptionError("ray_address" if self.ray_address else "ray_accelerator",
                                  "{ray_address} and {ray_accelerator} go with {executor} {ray}", ray=ray)
            count = len(self.gpus or (0,))
            if not _whole(self.gpus_per_trial) or self.gpus_per_trial < 1 or count % self.gpus_per_trial:
                raise OptionError("gpus_per_trial", "{gpus_per_trial} {got}: expected a positive divisor of the "
                                  "number of {gpus} ({count})", got=self.gpus_per_trial, count=count)
            return
        if self.backend == Backend.SIM:
            raise OptionError("executor", "{executor} {ray} runs measured trials; {backend} {sim} replays here, "
                              "without a cluster", ray=ray, sim=Backend.SIM)
        if self.gpus:
            raise OptionError("gpus", "{gpus} picks GPUs of this machine; with {executor} {ray}, Ray assigns each "
                              "trial its GPUs", ray=ray)
        if not _whole(self.gpus_per_trial) or self.gpus_per_trial < 1:
            raise OptionError("gpus_per_trial", "{gpus_per_trial} {got}: expected at least 1",
                              got=self.gpus_per_trial)

    def _check_dry_run(self) -> None:
        """A dry run replaces the GPU's trials with replays of its trace: nothing of a measured sweep goes with it."""
        if not isinstance(self.dry_run, bool):
            raise OptionError("dry_run", "{dry_run}: expected True or False, got {got}", got=shown(self.dry_run))
        if self.arch is not None and not self.dry_run:
            raise OptionError("arch", "{arch} names the GPU a dry run stands for: give {dry_run} with it")
        if not self.dry_run:
            return
        if self.backend not in (Backend.AUTO, Backend.SIM):
            raise OptionError("backend", "{dry_run} runs nothing on a GPU and replays every setting: leave "
                              "{backend} {got} out", got=self.backend)
        for name in ("trace", "check_growth"):
            if getattr(self, name) is not None:
                raise OptionError(name, "{%s} does not go with {dry_run}, which makes the trace itself and measures "
                                  "nothing" % name)
        if self.executor != ExecutorKind.LOCAL:
            raise OptionError("executor", "{dry_run} runs here, without a cluster")


# Called after every finished trial with (record, trials done, trials planned).
ProgressFn = Callable[[TrialRecord, int, int], None]
# Called during a search with (env_id, settings replayed, settings to replay, the best setting so far or '').
SearchProgressFn = Callable[[str, int, int, str], None]
# Called as each phase starts, with its name and, where the phase counts trials, (done, total) known up front.
PhaseFn = Callable[[str, "tuple[int, int] | None"], None]


@dataclass(frozen=True)
class Estimate:
    """About how many GPU trials the sweep runs in all (a recording trial included), how many are done, and, once
    one has run, the GPU time they took and about how long the rest take, from the measured trials' lengths."""

    trials: int
    done: int
    seconds_done: float | None = None
    seconds_left: float | None = None


# Called before the first GPU trial and after each one, with the estimate as it stands.
EstimateFn = Callable[[Estimate], None]


def _ignore(*_: Any) -> None:
    pass


class SweepNotice(UserWarning):
    """A sweep's notice where its caller took none (SweepCallbacks.notice): said as a Python warning, so that
    what changes how to read its results (no GPU visible: replayed, not measured) is never silent."""


def warn(text: str) -> None:
    """`text` as a SweepNotice, shown where the caller's code called into alloctune (its `sweep(...)` line)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        level, frame = level + 1, frame.f_back
    warnings.warn(str(text), SweepNotice, stacklevel=level)


@dataclass(frozen=True)
class SweepCallbacks:
    """What a sweep tells its caller as it goes; none changes what it does, so none is an option."""

    progress: ProgressFn = _ignore
    search_progress: SearchProgressFn = _ignore
    notice: Callable[[str], None] = warn   # a line for the user (an OptionText where it names options)
    phase: PhaseFn = _ignore
    estimate: EstimateFn = _ignore


def check_timeout(value: object, name: str = "timeout_s") -> None:
    """A time limit in seconds (a trial's, a recording's): positive, at most MAX_TIMEOUT_S, or None."""
    if value is not None and not (_finite(value) and 0 < value <= MAX_TIMEOUT_S):   # type: ignore[operator]
        raise OptionError(name, "{%s} must be a positive number of seconds, at most {most:.0f}, got {got!r}" % name,
                          most=MAX_TIMEOUT_S, got=value)


def check_gpus(gpus: Sequence[object], name: str = "gpus") -> None:
    """GPU indices of this machine: at least one, distinct, each a whole number >= 0."""
    if (not gpus or not all(_whole(g) and g >= 0 for g in gpus)   # type: ignore[operator]
            or len(set(gpus)) != len(gpus)):
        raise OptionError(name, "{%s} must be distinct GPU indices >= 0, got {got!r}" % name, got=gpus)


def _member(name: str, kind: type[enum.Enum], value: object) -> Any:
    """`value` as a member of `kind`, else an OptionError listing the names it takes."""
    try:
        return kind(value)
    except ValueError:
        names = [str(m.value) for m in kind]
        raise OptionError(name, "{%s} expects {names}, got {got!r}" % name, got=value,
                          names=", ".join(names[:-1]) + " or " + names[-1]) from None


def _at_least(name: str, value: object, least: int, most: int = MAX_INT) -> None:
    """A whole number from `least` to `most` (by default 64 bits: what sweep.json holds)."""
    if not (isinstance(value, int) and not isinstance(value, bool) and least <= value <= most):
        raise OptionError(name, "{%s} must be a whole number from {least} to {most}, got {got!r}" % name,
                          least=least, most=MAX_INT_TEXT if most == MAX_INT else most, got=value)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
