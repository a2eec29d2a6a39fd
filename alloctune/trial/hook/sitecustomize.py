"""Start-up hook for every Python process of a user's command run by alloctune (`sweep -- CMD`, `record -- CMD`).

This folder is first on the command's PYTHONPATH, so each Python process (every torchrun rank, spawned or
forked workers that start an interpreter) imports this module at start-up. It chains to the user's own
sitecustomize, then, when ALLOCTUNE_HOOK_OUT names a folder:

- registers, without importing torch, a watch for the import of `torch.cuda`; when that module exists, it queues
  (torch.cuda._lazy_call) what must happen when the process initialises CUDA: the memory budget, allocation
  history when recording, a sampler of device-level memory in use, the SIGTERM handler. A process that never
  initialises CUDA pays for one import-system lookup;
- at exit (normal end, uncaught exception, or SIGTERM from a time limit), in a process that initialised CUDA,
  writes `proc-<pid>.json` to that folder: the allocator peaks per device used, retries, OOMs, device-level peak,
  the settings in force as torch reports them (`child.effective_settings`), the process's rank, its step marks
  (`alloctune.step`) and an uncaught OOM's message; when recording, also `trace-<pid>.pickle` (a snapshot holding
  only plain values: alloctune's loader admits nothing else).

Everything here must stay cheap and must never break the user's program: failures of the hook are swallowed.
Environment (set by `alloctune.trial.command`): ALLOCTUNE_HOOK_OUT, ALLOCTUNE_HOOK_CONF (the setting asked for, checked
against the one in force), ALLOCTUNE_HOOK_BUDGET_BYTES or ALLOCTUNE_HOOK_BUDGET_FRACTION, ALLOCTUNE_HOOK_RECORD=1.
"""
import atexit
import json
import os
import sys
import threading
import time

_OUT = os.environ.get("ALLOCTUNE_HOOK_OUT")
SAMPLE_INTERVAL_S = 0.05


def _chain_user_sitecustomize():
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
        sys.modules["sitecustomize"] = ours  # the import system expects to find this module under its name


class _State:
    """What this process has seen since CUDA started."""

    def __init__(self):
        self.started = False
        self.device_peak = {}       # device index -> most memory in use on the device (driver's view)
        self.overhead = {}          # device index -> most in use outside the allocator (context, libraries)
        self.oom_message = None
        self.written = False
        self.stop = threading.Event()
        self.sampler_stopped = threading.Event()
        self.lock = threading.Lock()


_state = _State()


def _rank():
    for var in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None


def _sample(torch):
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


def _sampler(torch):
    try:
        while not _state.stop.wait(SAMPLE_INTERVAL_S):
            _sample(torch)
    except Exception:
        pass
    finally:
        _state.sampler_stopped.set()


def _on_cuda_init():
    """Runs inside torch.cuda's lazy initialisation, before the program's first allocation."""
    import torch

    _state.started = True
    budget_bytes = os.environ.get("ALLOCTUNE_HOOK_BUDGET_BYTES")
    fraction = os.environ.get("ALLOCTUNE_HOOK_BUDGET_FRACTION")
    if budget_bytes or fraction:
        total = torch.cuda.get_device_properties(0).total_memory
        share = min(1.0, int(budget_bytes) / total) if budget_bytes else float(fraction)
        for i in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(share, i)
    if os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1":
        # context=None: no stack frames, so a trace of a million events stays small.
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=10_000_000)
    threading.Thread(target=_sampler, args=(torch,), name="alloctune-sampler", daemon=True).start()
    _install_sigterm()


def _safely(fn):
    def run(*args):
        try:
            fn(*args)
        except Exception as exc:  # the hook must never break the user's program
            print(f"alloctune hook: {type(exc).__name__}: {exc}", file=sys.stderr)
    return run


def _install_sigterm():
    """On SIGTERM (a time limit, or torchrun stopping its workers) write the peaks first, then do what the
    program's own handler, or the default, would have done."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        _safely(_write)()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)


def _peaks(torch):
    devices = []
    for i in range(torch.cuda.device_count()):
        stats = torch.cuda.memory_stats(i)
        if not stats.get("reserved_bytes.all.peak"):
            continue
        devices.append({
            "device": i,
            "peak_reserved_bytes": int(stats["reserved_bytes.all.peak"]),
            "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
            "peak_requested_bytes": stats.get("requested_bytes.all.peak"),
            "num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "num_ooms": int(stats.get("num_ooms", 0)),
            "num_device_alloc": stats.get("num_device_alloc"),
            "num_device_free": stats.get("num_device_free"),
            "device_peak_used_bytes": _state.device_peak.get(i),
            "overhead_bytes": _state.overhead.get(i),
        })
    return devices


def _steps():
    steps = sys.modules.get("alloctune.runtime.steps")
    return list(steps.marks()) if steps is not None else []


def _write():
    """This process's figures, once; only for a process that initialised CUDA or marked steps."""
    torch = sys.modules.get("torch")
    cuda = bool(torch is not None and _state.started and torch.cuda.is_initialized())
    marks = _steps()
    with _state.lock:
        if _state.written or not (cuda or marks):
            return
        _state.written = True
    _state.stop.set()
    record = {"pid": os.getpid(), "ppid": os.getppid(), "rank": _rank(), "argv": [str(a) for a in sys.argv],
              "cuda": cuda, "steps": marks, "oom_message": _state.oom_message, "devices": [],
              "torch_version": str(torch.__version__) if torch is not None else None,
              "effective_conf": None, "mismatch": None, "exit_time": time.time()}
    if cuda:
        _state.sampler_stopped.wait(1.0)   # not two threads switching devices at once
        current = torch.cuda.current_device()
        _sample(torch)
        if torch.cuda.memory_reserved(current) > 0:   # the program's device again, if it has a context
            torch.cuda.set_device(current)             # (a SIGTERM handler of its own may follow)
        record["devices"] = _peaks(torch)
        # Absolute: this module runs as the top-level `sitecustomize`, not as part of the package.
        from alloctune.settings.readback import mismatch
        from alloctune.trial.child import effective_settings

        effective, readable = effective_settings()
        record["effective_conf"] = effective
        record["mismatch"] = mismatch(os.environ.get("ALLOCTUNE_HOOK_CONF", ""), effective, readable)
        record["device_total_bytes"] = torch.cuda.get_device_properties(0).total_memory
        if os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1":
            _dump_trace(torch, record)
    path = os.path.join(_OUT, f"proc-{os.getpid()}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, default=str)
    os.replace(path + ".tmp", path)


def _dump_trace(torch, record):
    import pickle

    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    device = max(record["devices"], key=lambda d: d["peak_reserved_bytes"], default=None)
    measured = dict(device or {}, conf=os.environ.get("ALLOCTUNE_HOOK_CONF", ""), state="ok",
                    effective_conf=record["effective_conf"])
    meta = {"command": record["argv"], "rank": record["rank"], "pid": record["pid"],
            "torch_version": record["torch_version"], "device_total_bytes": record["device_total_bytes"],
            "overhead_bytes": (device or {}).get("overhead_bytes"), "measured": [measured],
            # where it was recorded, as a workload's trace says it: reports of a replay name that GPU and torch
            "env": {"gpu": torch.cuda.get_device_properties(0).name, "torch": record["torch_version"]}}
    # Read back with an unpickler that admits no class: only plain JSON values may go in.
    snapshot["alloctune"] = json.loads(json.dumps(meta, default=str))
    path = os.path.join(_OUT, f"trace-{os.getpid()}.pickle")
    with open(path + ".tmp", "wb") as f:
        pickle.dump(snapshot, f)
    os.replace(path + ".tmp", path)


def _watch_excepthook():
    previous = sys.excepthook

    def hook(kind, value, tb):
        if "out of memory" in str(value).lower() or kind.__name__ == "OutOfMemoryError":
            _state.oom_message = f"{kind.__name__}: {value}"[-2000:]
        previous(kind, value, tb)

    sys.excepthook = hook


class _TorchCudaWatch:
    """A meta-path finder that only waits for `torch.cuda` to be imported, then queues `_on_cuda_init`."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            module._lazy_call(_safely(_on_cuda_init))

        spec.loader.exec_module = exec_module
        return spec


def _start():
    if not _OUT:
        return
    sys.meta_path.insert(0, _TorchCudaWatch())
    _watch_excepthook()
    atexit.register(_safely(_write))


_chain_user_sitecustomize()
_start()
