"""Start-up hook for every Python process of a user's command run by alloctune (`sweep -- CMD`, `record -- CMD`).

This folder is first on the command's PYTHONPATH, so each Python process (every torchrun rank, spawned or
forked workers that start an interpreter) imports this module at start-up. It chains to the user's own
sitecustomize, then, when ALLOCTUNE_HOOK_OUT names a folder:

- installs the feature watch (`alloctune.runtime.features`) and, without importing torch, watches imports
  (`alloctune.runtime.imports`): when `torch.cuda` loads it queues (torch.cuda._lazy_call) what must happen when the
  process initialises CUDA: each device's memory baseline, the budget where there is one GPU, allocation history
  when recording, the sampler of the process's device memory (`runtime/devices.py`: it also sets the budget on each
  device it sees the process allocate on), the SIGTERM handler; with a budget it wraps `torch.cuda.set_device`,
  so that a process that sees several GPUs gets the budget on the one it picks, before it allocates there, and on
  no other. Optimizer steps, `alloctune.step()` marks and what --step-on names are counted (`runtime/stepwatch.py`
  sees them, `runtime/counting.py` counts them, times the steps after the warm-up and ends the process at the end
  of a --steps window or of the automatic one, not before ALLOCTUNE_HOOK_PEAK_STEP; ALLOCTUNE_HOOK_ALTERNATE:
  `runtime/alternate.py` switches settings between blocks of steps);
- watches uncaught exceptions for an out-of-memory error (`alloctune.runtime.oom`, the rule every part uses);
- at exit (normal end, uncaught exception, SIGTERM from a time limit, or the end of the window), in a process
  that initialised CUDA or marked or counted steps, writes `proc-<pid>.json` to that folder: a `ProcessReport`
  (`alloctune/runtime/peaks.py`, filled in by `alloctune.runtime.report`, read back by `alloctune.trial.job`)
  with the allocator peaks per device used, the process's device memory, the settings in force, the budget read
  back per device, its rank, steps, window readings, growth samples, features and an uncaught OOM's message; when
  recording, also `trace-<pid>.pickle` (`alloctune.runtime.traces`; plain values only: alloctune's loader admits
  nothing else), with the CUDA graph captures the hook saw (`alloctune.runtime.graphs`, patched in as
  torch.cuda.graphs and torch.cuda.memory load). A process that never initialised CUDA has no device figures in
  it.

Everything here must stay cheap and must never break the user's program: failures of the hook are swallowed, and
nothing it does inside the program's calls (an optimizer step, a counted call) raises into them. It runs as the
top-level module `sitecustomize`, possibly under another interpreter than alloctune's: at import time it uses the
standard library only; alloctune's own modules (standard library only, no torch import) are imported by absolute
name inside the functions that need them (the command's PYTHONPATH has the package too): the import watch and
feature watch at start-up, the rest when torch loads, at the first step or at exit. Environment: the
ALLOCTUNE_HOOK_* variables that `alloctune.trial.command.hook_environment` sets (and documents).
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

TYPE_CHECKING = False   # typing is not imported at start-up: every Python process of the command pays for it
if TYPE_CHECKING:
    from types import FrameType, ModuleType, TracebackType
    from typing import Any, Callable

    from alloctune.runtime.counting import Counter
    from alloctune.runtime.devices import Budget, Sampler
    from alloctune.runtime.stopping import SharedStop


def _chain_user_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    path = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # type: ignore[import-not-found]  # noqa: F401  (the user's own, if any)
    except ImportError:
        pass
    finally:
        sys.path[:] = path
        if ours is not None:
            sys.modules["sitecustomize"] = ours  # the import system expects to find this module under its name


class _State:
    """What this process has seen since start-up (CUDA, steps, the window)."""

    def __init__(self, out: str):
        self.out = out                        # ALLOCTUNE_HOOK_OUT; empty: the hook does nothing
        self.started = False
        self.sampler: Sampler | None = None    # this process's memory on each device (runtime/devices.py)
        self.budget: Budget | None = None       # with a budget: set on each device as the process first uses it
        self.counter: Counter | None = None    # made at the first step (runtime/counting.py)
        self.optimizer_hook: bool | None = None
        self.window_ended = False
        self.oom_message: str | None = None
        self.written = False
        self.lock = threading.Lock()


_state = _State(os.environ.get("ALLOCTUNE_HOOK_OUT", ""))


def _number(var: str) -> int | None:
    value = os.environ.get(var, "")
    return int(value) if value.isdigit() else None


def _on_cuda_init() -> None:
    """Runs inside torch.cuda's lazy initialisation, before the program's first allocation."""
    import torch

    from alloctune.runtime.devices import Budget, DeviceMemory, Sampler

    _state.started = True
    memory = DeviceMemory(torch.cuda)   # reads each device's baseline now, before any allocation
    budget_bytes, fraction = _number("ALLOCTUNE_HOOK_BUDGET_BYTES"), os.environ.get("ALLOCTUNE_HOOK_BUDGET_FRACTION")
    if budget_bytes or fraction:
        _state.budget = Budget(torch.cuda, budget_bytes, float(fraction) if fraction else None)
        if torch.cuda.device_count() == 1:
            _state.budget.use(0)   # the one device it can use: its budget before the first allocation
    sampler = _state.sampler = Sampler(torch.cuda, memory, _state.budget)
    if os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1":
        from alloctune.runtime.traces import record_history

        record_history(torch)
    sampler.start()
    _install_sigterm()


def _watch_cuda(cuda: ModuleType) -> None:
    """torch.cuda has loaded: queue what CUDA initialisation must do, and, with a budget, catch the devices the
    program picks (torch.cuda.set_device: each rank of a job that sees every GPU), before it allocates there."""
    cuda._lazy_call(_safely(_on_cuda_init))
    if not (os.environ.get("ALLOCTUNE_HOOK_BUDGET_BYTES") or os.environ.get("ALLOCTUNE_HOOK_BUDGET_FRACTION")):
        return
    import functools

    original = cuda.set_device

    @functools.wraps(original)
    def set_device(device: Any) -> None:
        original(device)
        if _state.budget is not None and cuda.is_initialized():
            _safely(_state.budget.use)(cuda.current_device())

    setattr(cuda, "set_device", set_device)


def _window_over() -> None:
    """The --steps window is over: write this process's report, flush its output, end it here (exit status 0, no
    exception into the program, no atexit handlers: the report is written)."""
    _state.window_ended = True
    _safely(_write)()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0)


def _counter() -> Counter:
    if _state.counter is None:
        from alloctune.runtime.alternate import from_environment
        from alloctune.runtime.counting import Counter
        from alloctune.runtime.devices import CudaJob, peaks

        with _state.lock:
            if _state.counter is None:
                job = CudaJob(lambda: torch.cuda if (torch := _cuda_torch()) is not None else None, _window_over)
                _state.counter = Counter(job, _number("ALLOCTUNE_HOOK_WARMUP_STEPS") or 0,
                                         _number("ALLOCTUNE_HOOK_WINDOW_STEPS"),
                                         _number("ALLOCTUNE_HOOK_GROWTH_STEPS"),
                                         os.environ.get("ALLOCTUNE_HOOK_STEP_ON", ""), _early_stop(),
                                         ends=os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1",
                                         peak_step=_number("ALLOCTUNE_HOOK_PEAK_STEP") or 0,
                                         alternation=from_environment(os.environ, job, lambda: peaks(
                                             cuda, _state.sampler) if (cuda := job.cuda()) else [], _state.out))
    return _state.counter


def _early_stop() -> SharedStop | None:
    """ALLOCTUNE_HOOK_EARLY_STOP=1: the automatic window, agreed on in the hook's folder by every process."""
    from alloctune.runtime.stopping import SharedStop

    return SharedStop(_state.out) if os.environ.get("ALLOCTUNE_HOOK_EARLY_STOP") == "1" else None


def _capturing() -> bool:
    """A CUDA graph is being captured on this thread's stream: its steps do no work now, and a synchronisation
    would break the capture."""
    torch = _cuda_torch()
    return torch is not None and bool(torch.cuda.is_current_stream_capturing())


def _counted(count: Callable[[Counter], None]) -> None:
    """One step seen by a hook or wrapper inside the program's call: never raises into it."""
    try:
        if not _capturing():
            count(_counter())
    except Exception:
        pass


def _count_optimizer_steps(optimizer_module: ModuleType) -> None:
    from alloctune.runtime.stepwatch import optimizer_steps

    _state.optimizer_hook = optimizer_steps(optimizer_module,
                                            lambda optimizer: _counted(lambda c: c.optimizer_step(optimizer)))


def _count_marks(steps_module: ModuleType) -> None:
    steps_module.listen(lambda: _counted(lambda counter: counter.mark()))


def _count_call() -> None:
    _counted(lambda counter: counter.call())


def _count_calls(module: ModuleType, qualname: str) -> None:
    from alloctune.runtime.stepwatch import callable_returns

    callable_returns(module, qualname, _count_call)


def _count_forward(module_module: ModuleType) -> None:
    from alloctune.runtime.stepwatch import top_level_calls

    top_level_calls(module_module, _count_call)


def _safely(fn: Callable[..., object]) -> Callable[..., None]:
    def run(*args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the hook must never break the user's program
            print(f"alloctune hook: {type(exc).__name__}: {exc}", file=sys.stderr)
    return run


def _install_sigterm() -> None:
    """On SIGTERM (a time limit, or torchrun stopping its workers) write the peaks first, then do what the
    program's own handler, or the default, would have done."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        _safely(_write)(False)   # no synchronisation: a device that hangs must not cost the report
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)


def _cuda_torch() -> ModuleType | None:
    """torch, if this process initialised CUDA through it (since the hook's watch saw torch.cuda load)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and _state.started and torch.cuda.is_initialized() else None


def _steps() -> list[tuple[float, float]]:
    steps = sys.modules.get("alloctune.runtime.steps")
    return list(steps.marks()) if steps is not None else []


def _write(sync: bool = True) -> None:
    """This process's report, once; only for a process that initialised CUDA, marked steps or had its steps
    counted (a CPU-only process: its steps and features, no devices). `sync`: synchronise the devices first,
    for the end of the counted steps' window (at a normal exit)."""
    cuda, marks, counter = _cuda_torch(), _steps(), _state.counter
    with _state.lock:
        if _state.written or not (cuda is not None or marks or (counter is not None and counter.sources)):
            return
        _state.written = True
    if _state.sampler is not None:
        _state.sampler.stop.set()
    from alloctune.files import write_file
    from alloctune.runtime.peaks import ProcessReport, report_path
    from alloctune.runtime.process import rank
    from alloctune.runtime.report import with_cuda, with_steps

    torch = sys.modules.get("torch")
    report = ProcessReport(pid=os.getpid(), ppid=os.getppid(), rank=rank(), argv=[str(a) for a in sys.argv],
                           cuda=cuda is not None, steps=marks, oom_message=_state.oom_message,
                           torch_version=str(torch.__version__) if torch is not None else None,
                           exit_time=time.time(), optimizer_hook=_state.optimizer_hook,
                           window_ended=_state.window_ended, features=_features(),
                           auto_window=_state.window_ended and counter is not None and counter.auto_ended,
                           budgets=list(_state.budget.set) if _state.budget is not None else [])
    if counter is not None:
        report = with_steps(counter, report, sync and cuda is not None and not _state.window_ended)
    if cuda is not None:
        conf, recording = os.environ.get("ALLOCTUNE_HOOK_CONF", ""), os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1"
        report, snapshot = with_cuda(cuda, report, _state.sampler, conf, recording, counter)
        if snapshot is not None:   # recording: the trace, and the recording stopped
            from alloctune.runtime.traces import write_trace

            write_trace(cuda, _state.out, report, snapshot, conf, _state.counter)
    write_file(report_path(_state.out, report.pid), json.dumps(report.to_json()).encode())


def _features() -> dict[str, Any] | None:
    try:
        from alloctune.runtime import features

        return features.observed()
    except Exception as exc:   # the figures still count without it
        print(f"alloctune hook: features: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _watch_excepthook() -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        _safely(_note_oom)(kind, value)
        previous(kind, value, tb)

    sys.excepthook = hook


def _note_oom(kind: type[BaseException], value: BaseException) -> None:
    from alloctune.runtime.oom import is_oom

    if is_oom(value):
        _state.oom_message = f"{kind.__name__}: {value}"[-2000:]


def _watch_failed(name: str, exc: Exception) -> None:
    print(f"alloctune hook: cannot watch {name}: {type(exc).__name__}: {exc}", file=sys.stderr)


def _forked() -> None:
    """A forked child counts its own steps, not those its parent had counted."""
    _state.counter = None


def _start() -> None:
    """Watch the imports that matter (without importing them), the features, uncaught OOMs, and exit."""
    if not _state.out:
        return
    from alloctune.runtime import features
    from alloctune.runtime.imports import after_import

    if os.environ.get("ALLOCTUNE_HOOK_DRYRUN"):   # record --dry-run: fake CUDA tensors, traced (alloctune/dryrun)
        from alloctune.dryrun.start import install

        install(_state.out, os.environ["ALLOCTUNE_HOOK_DRYRUN"])
    features.install()
    watches: list[tuple[str, Callable[[ModuleType], None]]] = [
        ("torch.cuda", _watch_cuda), ("torch.optim.optimizer", _count_optimizer_steps),
        ("alloctune.runtime.steps", _count_marks)]
    if os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1":   # the trace's CUDA graph captures (runtime/graphs.py)
        from alloctune.runtime import graphs

        watches += [("torch.cuda.graphs", graphs.watch_graphs), ("torch.cuda.memory", graphs.watch_memory)]
    step_on = os.environ.get("ALLOCTUNE_HOOK_STEP_ON", "")
    if step_on == "forward":
        watches.append(("torch.nn.modules.module", _count_forward))
    elif step_on:
        module, _, qualname = step_on.partition(":")
        watches.append((module, lambda m: _count_calls(m, qualname)))
    after_import(watches, _watch_failed)
    if hasattr(os, "register_at_fork"):   # POSIX
        os.register_at_fork(after_in_child=_forked)
    _watch_excepthook()
    atexit.register(_safely(_write))


_chain_user_sitecustomize()
_safely(_start)()
