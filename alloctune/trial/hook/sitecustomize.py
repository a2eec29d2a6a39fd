"""Start-up hook for every Python process of a user's command run by alloctune (`sweep -- CMD`, `record -- CMD`).

This folder is first on the command's PYTHONPATH, so each Python process (every torchrun rank, spawned or
forked workers that start an interpreter) imports this module at start-up. It chains to the user's own
sitecustomize, then, when ALLOCTUNE_HOOK_OUT names a folder:

- registers, without importing torch, a watch for the import of `torch.cuda`; when that module exists, it queues
  (torch.cuda._lazy_call) what must happen when the process initialises CUDA: the memory budget, allocation
  history when recording, a sampler of device-level memory in use, the SIGTERM handler. A process that never
  initialises CUDA pays for one import-system lookup;
- watches uncaught exceptions for an out-of-memory error (`alloctune.runtime.oom`, the rule every part uses);
- at exit (normal end, uncaught exception, or SIGTERM from a time limit), in a process that initialised CUDA or
  marked steps (`alloctune.step`), writes `proc-<pid>.json` to that folder: a `ProcessReport`
  (`alloctune/trial/peaks.py`), which `alloctune.trial.command` reads back with the same record: the allocator
  peaks per device used, retries, OOMs, device-level peak, the settings in force as torch reports them
  (`child.effective_settings`), the process's rank, its step marks and an uncaught OOM's message; when recording,
  also `trace-<pid>.pickle` (a snapshot holding only plain values: alloctune's loader admits nothing else).

Everything here must stay cheap and must never break the user's program: failures of the hook are swallowed.
It runs as the top-level module `sitecustomize`, possibly under another interpreter than alloctune's: at import
time it uses the standard library only; alloctune's own modules are imported, by absolute name, inside the
functions that need them (the command's PYTHONPATH has the package too).

Environment (set by `alloctune.trial.command.hook_environment`): ALLOCTUNE_HOOK_OUT (the folder), ALLOCTUNE_HOOK_CONF
(the setting asked for, checked against the one in force), ALLOCTUNE_HOOK_BUDGET_BYTES or
ALLOCTUNE_HOOK_BUDGET_FRACTION (the memory budget), ALLOCTUNE_HOOK_RECORD=1 (record the allocation trace).
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
    from importlib.machinery import ModuleSpec
    from types import FrameType, ModuleType, TracebackType
    from typing import Any, Callable, Sequence

    from alloctune.trial.peaks import DevicePeaks, ProcessReport

SAMPLE_INTERVAL_S = 0.05


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
    """What this process has seen since CUDA started."""

    def __init__(self, out: str):
        self.out = out                        # ALLOCTUNE_HOOK_OUT; empty: the hook does nothing
        self.started = False
        self.device_peak: dict[int, int] = {}  # device index -> most memory in use on the device (driver's view)
        self.overhead: dict[int, int] = {}     # device index -> most in use outside the allocator (context, libraries)
        self.oom_message: str | None = None
        self.written = False
        self.stop = threading.Event()
        self.sampler_stopped = threading.Event()
        self.lock = threading.Lock()


_state = _State(os.environ.get("ALLOCTUNE_HOOK_OUT", ""))


def _rank() -> int | None:
    for var in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None


def _sample(torch: ModuleType) -> None:
    """Device-level memory in use on every device this process allocated on.

    Only devices that hold an allocation (so a context) are touched, and the calling thread is first moved onto
    the device it reads: a device guard that switched back would otherwise make a context on the thread's
    previous device, which may be a GPU this process never used (another rank's)."""
    for i in range(torch.cuda.device_count()):
        reserved = torch.cuda.memory_reserved(i)
        if reserved <= 0:
            continue
        torch.cuda.set_device(i)
        free, total = torch.cuda.mem_get_info(i)
        with _state.lock:
            _state.device_peak[i] = max(_state.device_peak.get(i, 0), total - free)
            _state.overhead[i] = max(_state.overhead.get(i, 0), total - free - reserved)


def _sampler(torch: ModuleType) -> None:
    try:
        while not _state.stop.wait(SAMPLE_INTERVAL_S):
            _sample(torch)
    except Exception:
        pass
    finally:
        _state.sampler_stopped.set()


def _on_cuda_init() -> None:
    """Runs inside torch.cuda's lazy initialisation, before the program's first allocation."""
    import torch

    _state.started = True
    _set_budget(torch)
    if os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1":
        # context=None: no stack frames, so a trace of a million events stays small.
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=10_000_000)
    threading.Thread(target=_sampler, args=(torch,), name="alloctune-sampler", daemon=True).start()
    _install_sigterm()


def _set_budget(torch: ModuleType) -> None:
    """The memory budget as a per-process fraction on every device: a byte budget is a share of device 0's memory."""
    budget_bytes = os.environ.get("ALLOCTUNE_HOOK_BUDGET_BYTES")
    fraction = os.environ.get("ALLOCTUNE_HOOK_BUDGET_FRACTION")
    if budget_bytes:
        share = min(1.0, int(budget_bytes) / torch.cuda.get_device_properties(0).total_memory)
    elif fraction:
        share = float(fraction)
    else:
        return
    for i in range(torch.cuda.device_count()):
        torch.cuda.set_per_process_memory_fraction(share, i)


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
        _safely(_write)()
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


def _write() -> None:
    """This process's report, once; only for a process that initialised CUDA or marked steps."""
    cuda, marks = _cuda_torch(), _steps()
    with _state.lock:
        if _state.written or not (cuda is not None or marks):
            return
        _state.written = True
    _state.stop.set()
    from alloctune.trial.peaks import ProcessReport, report_path

    torch = sys.modules.get("torch")
    report = ProcessReport(pid=os.getpid(), ppid=os.getppid(), rank=_rank(), argv=[str(a) for a in sys.argv],
                           cuda=cuda is not None, steps=marks, oom_message=_state.oom_message,
                           torch_version=str(torch.__version__) if torch is not None else None,
                           exit_time=time.time())
    if cuda is not None:
        report = _with_cuda(cuda, report)
        if os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1":
            _dump_trace(cuda, report)
    _replace(report_path(_state.out, report.pid), json.dumps(report.to_json()).encode())


def _with_cuda(torch: ModuleType, report: ProcessReport) -> ProcessReport:
    """`report` with what the allocator and the driver saw on each device, and the settings in force."""
    from dataclasses import replace

    from alloctune.settings.readback import mismatch
    from alloctune.trial.child import effective_settings

    _state.sampler_stopped.wait(1.0)   # not two threads switching devices at once
    current = torch.cuda.current_device()
    _sample(torch)
    if torch.cuda.memory_reserved(current) > 0:   # the program's device again, if it has a context
        torch.cuda.set_device(current)             # (a SIGTERM handler of its own may follow)
    devices = _peaks(torch)
    effective, readable = effective_settings()
    return replace(report, devices=devices, effective_conf=effective,
                   mismatch=mismatch(os.environ.get("ALLOCTUNE_HOOK_CONF", ""), effective, readable),
                   device_total_bytes=torch.cuda.get_device_properties(0).total_memory)


def _peaks(torch: ModuleType) -> list[DevicePeaks]:
    """Each device this process allocated on (a reserved peak above zero)."""
    from alloctune.trial.peaks import device_peaks

    devices = []
    for i in range(torch.cuda.device_count()):
        stats = torch.cuda.memory_stats(i)
        if stats.get("reserved_bytes.all.peak"):
            devices.append(device_peaks(stats, i, _state.device_peak.get(i), _state.overhead.get(i)))
    return devices


def _dump_trace(torch: ModuleType, report: ProcessReport) -> None:
    import pickle
    from dataclasses import asdict

    from alloctune.results.records import TrialState
    from alloctune.trial.peaks import trace_path

    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    device = max(report.devices, key=lambda d: d.peak_reserved_bytes, default=None)
    measured = dict(asdict(device) if device else {}, conf=os.environ.get("ALLOCTUNE_HOOK_CONF", ""),
                    state=TrialState.OK.value, effective_conf=report.effective_conf)
    meta = {"command": report.argv, "rank": report.rank, "pid": report.pid, "torch_version": report.torch_version,
            "device_total_bytes": report.device_total_bytes,
            "overhead_bytes": device.overhead_bytes if device else None, "measured": [measured]}
    # Read back with an unpickler that admits no class: only plain JSON values may go in.
    snapshot["alloctune"] = json.loads(json.dumps(meta, default=str))
    _replace(trace_path(_state.out, report.pid), pickle.dumps(snapshot))


def _replace(path: str, data: bytes) -> None:
    """Write `path` whole or not at all: the reader never sees half a file."""
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


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


class _TorchCudaWatch:
    """A meta-path finder that only waits for `torch.cuda` to be imported, then queues `_on_cuda_init`."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            loader_exec(module)
            module._lazy_call(_safely(_on_cuda_init))

        setattr(spec.loader, "exec_module", exec_module)   # this loader instance only: it loads torch.cuda alone
        return spec


def _start() -> None:
    if not _state.out:
        return
    sys.meta_path.insert(0, _TorchCudaWatch())
    _watch_excepthook()
    atexit.register(_safely(_write))


_chain_user_sitecustomize()
_start()
