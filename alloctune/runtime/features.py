"""Inside each process of a trial's job: what it does that allocator settings are sensitive to.

The start-up hook calls `install()` before the program runs; `observed()` at exit gives the process's record (a
JSON-able dict of `runtime/observation.py`'s `Observation`). Nothing here imports torch: `install()` wraps each watched
torch module right after it executes (`imports.after_import`: before the code that imported it continues, so
`from torch.cuda import graph_pool_handle` gets the wrapper too), and queues a look at the
environment for when CUDA initialises. Wrappers note, then call the original with the same arguments and
return what it returns; its exceptions propagate. A wrapper that cannot be installed is noted in `failures`,
never raised: the hook must not break the user's program.

Watched (names checked in torch 2.13's source, and in older torch/cuda/memory.py versions where noted):
- CUDA graph capture: `torch.cuda.graphs.CUDAGraph.capture_begin`, the Python method every capture goes
  through (`torch.cuda.graph`, `make_graphed_callables`, inductor's CUDA-graph trees); its `pool` argument and
  `torch.cuda.graphs.graph_pool_handle` for pools shared between captures. Also the device-generic
  `torch.accelerator.graphs.Graph.capture_begin` of newer torch (2.13), whose pool is a constructor argument.
- CUDA tensors between processes (`torch.multiprocessing.reductions`): `reduce_tensor` (sending; counted by the
  tensor's device type), `rebuild_cuda_tensor` (receiving CUDA), `rebuild_tensor` (receiving CPU). The
  reducers torch registers with multiprocessing are these functions, so queues and pipes go through them.
- `torch.cuda.memory.MemPool` (with or without its own allocator) and `use_mem_pool`, where the torch has them.
- Process groups: `torch.distributed.distributed_c10d.init_process_group` and `new_group`, by the backend the
  created group reports (`get_backend`: 'gloo', 'nccl', 'cpu:gloo,cuda:nccl'); at the first NCCL group, the
  registration variables (NCCL_VARIABLES); `ProcessGroupNCCL.register_mem_pool` where present (CUDA builds).
- `torch.compile`: its mode, backend and options (CUDA graphs: CUDAGRAPH_MODES, `triton.cudagraphs`, the
  'cudagraphs' backend); at exit, inductor's global `config.triton.cudagraphs` if inductor was loaded.
- Run-time changes of allocator settings: `torch._C._accelerator_setAllocatorSettings` (2.13) and
  `torch._C._cuda_cudaCachingAllocator_set_allocator_settings` (what `_set_allocator_settings` called before),
  which `torch.cuda.memory._set_allocator_settings` calls.
- The allocator variables (`PYTORCH_*ALLOC_CONF`) at start-up and when CUDA initialises; at exit, which one this
  torch read (`settings/known.py`) and which it did not; libraries of note imported (`observation.LIBRARIES`).
"""
import functools
import os
import sys
import threading

from .imports import after_import

# Inductor modes that turn CUDA graphs on (torch._inductor.list_mode_options, the same from 2.1 to 2.13).
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
# What makes NCCL register user buffers: graph registration of captured collectives (NCCL's own variable, on
# unless 0) and torch's allocator hook that registers every segment.
NCCL_VARIABLES = ("NCCL_GRAPH_REGISTER", "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK")
ALLOCATOR_SETTERS = ("_accelerator_setAllocatorSettings", "_cuda_cudaCachingAllocator_set_allocator_settings")
_WRAPPED = "__alloctune_wrapped__"   # marks our wrappers, so that a module patched twice is wrapped once


def _alloc_conf_env():
    return {k: v for k, v in os.environ.items() if k.startswith("PYTORCH_") and k.endswith("ALLOC_CONF")}


class _Seen:
    """What this process did, since start-up or since it was forked."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.ipc_sent = {}          # device type -> tensors
        self.ipc_received = {}
        self.process_groups = []    # backends, in creation order
        self.nccl_env = None        # NCCL_VARIABLES when the first NCCL group was made
        self.compile_calls = []     # distinct {mode, backend, cudagraphs}
        self.allocator_changes = []  # distinct settings strings, first seen first
        self.env_at_start = _alloc_conf_env()
        self.env_at_cuda_init = None
        self.failures = []

    def count(self, name, table=None):
        with self.lock:
            table = self.counts if table is None else table
            table[name] = table.get(name, 0) + 1

    def add(self, items, item):
        with self.lock:
            if item not in items:
                items.append(item)


_seen = _Seen()
_installed = False


def install():
    """Watch the torch modules of PATCHES: wrapped when imported, or now if already imported (a user
    sitecustomize that imported torch first). Once per process; no torch import."""
    global _installed
    if _installed:
        return
    _installed = True
    if hasattr(os, "register_at_fork"):   # POSIX
        os.register_at_fork(after_in_child=_forked)
    after_import(PATCHES.items(), _failed)


def observed():
    """This process's record (a dict of `Observation`'s fields). Called at exit: the settings table and the
    record type are imported here, not at start-up, which stays standard-library only."""
    from dataclasses import asdict

    from ..settings.known import unread_variables, variable_read
    from .observation import LIBRARIES, CompileCall, Observation

    torch = sys.modules.get("torch")
    version = str(torch.__version__) if torch is not None else None
    env = _seen.env_at_cuda_init if _seen.env_at_cuda_init is not None else _seen.env_at_start
    config = sys.modules.get("torch._inductor.config")
    inductor = getattr(getattr(config, "triton", None), "cudagraphs", None)
    with _seen.lock:
        counts = dict(_seen.counts)
        record = Observation(
            torch_version=version,
            graph_captures=counts.get("graph_captures", 0),
            graph_captures_shared_pool=counts.get("graph_captures_shared_pool", 0),
            graph_pool_handles=counts.get("graph_pool_handles", 0),
            ipc_sent=dict(_seen.ipc_sent), ipc_received=dict(_seen.ipc_received),
            mem_pools=counts.get("mem_pools", 0),
            mem_pools_custom_allocator=counts.get("mem_pools_custom_allocator", 0),
            mem_pool_uses=counts.get("mem_pool_uses", 0),
            process_groups=tuple(_seen.process_groups), nccl_env=_seen.nccl_env,
            nccl_mem_pool_registrations=counts.get("nccl_mem_pool_registrations", 0),
            compile_calls=tuple(CompileCall(**call) for call in _seen.compile_calls),
            inductor_cudagraphs=inductor if isinstance(inductor, bool) else None,
            allocator_changes=tuple(_seen.allocator_changes),
            alloc_conf_env=dict(_seen.env_at_start), alloc_conf_env_at_cuda_init=_seen.env_at_cuda_init,
            variable_read=variable_read(env, version) if version else None,
            unread_variables=unread_variables(env, version) if version else (),
            libraries=tuple(name for name in LIBRARIES if name in sys.modules),
            failures=tuple(_seen.failures))
    return asdict(record)


def _forked():
    """A forked child starts its own record (the parent's counts stay the parent's); the lock may have been
    held by a thread that the child does not have."""
    global _seen
    env_at_start = _seen.env_at_start
    _seen = _Seen()
    _seen.env_at_start = env_at_start


def _failed(name, exc):
    """A patch that could not be applied: an API this torch lacks or changed."""
    _seen.failures.append(f"{name}: {type(exc).__name__}: {exc}"[:300])


def _note(what, *args):
    """Run a note about a call; a note that fails is noted, never raised into the user's call."""
    try:
        what(*args)
    except Exception as exc:
        if len(_seen.failures) < 20:
            _seen.failures.append(f"{getattr(what, '__name__', what)}: {type(exc).__name__}: {exc}"[:300])


def _wrap(owner, attr, before=None, after=None, aliases=()):
    """Replace `owner.attr` (and the same object re-exported under `aliases`, modules already imported) by a
    wrapper: `before(*args, **kwargs)`, the original call, `after(result, *args, **kwargs)`."""
    original = getattr(owner, attr)
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if before is not None:
            _note(before, args, kwargs)
        result = original(*args, **kwargs)
        if after is not None:
            _note(after, result, args, kwargs)
        return result

    setattr(wrapper, _WRAPPED, True)
    setattr(owner, attr, wrapper)
    for alias in aliases:
        module = sys.modules.get(alias)
        if module is not None and getattr(module, attr, None) is original:
            setattr(module, attr, wrapper)
    return original, wrapper


def _argument(args, kwargs, name, index):
    return kwargs[name] if name in kwargs else (args[index] if len(args) > index else None)


# --- the patches, one per watched module --------------------------------------------------------------------

def _patch_torch(torch):
    def compiled(args, kwargs):
        mode, backend, options = kwargs.get("mode"), kwargs.get("backend"), kwargs.get("options") or {}
        cudagraphs = (mode in CUDAGRAPH_MODES or options.get("triton.cudagraphs") is True
                      or backend == "cudagraphs")
        _seen.add(_seen.compile_calls, {"mode": mode if isinstance(mode, str) else None,
                                        "backend": backend if isinstance(backend, str) else None,
                                        "cudagraphs": bool(cudagraphs)})

    _wrap(torch, "compile", before=compiled)
    for setter in ALLOCATOR_SETTERS:
        if hasattr(torch._C, setter):
            _wrap(torch._C, setter, before=lambda args, kwargs: _seen.add(
                _seen.allocator_changes, str(_argument(args, kwargs, "env", 0))))
    torch.cuda._lazy_call(_at_cuda_init)


def _at_cuda_init():
    _seen.env_at_cuda_init = _alloc_conf_env()


def _patch_graphs(graphs):
    def captured(args, kwargs):   # capture_begin(self, pool=None, ...)
        _seen.count("graph_captures")
        if _argument(args, kwargs, "pool", 1) is not None:
            _seen.count("graph_captures_shared_pool")

    _wrap(graphs.CUDAGraph, "capture_begin", before=captured)
    _wrap(graphs, "graph_pool_handle", before=lambda args, kwargs: _seen.count("graph_pool_handles"),
          aliases=("torch.cuda",))


def _patch_accelerator_graphs(graphs):
    def captured(args, kwargs):   # Graph.capture_begin(self): the pool was given to the constructor
        _seen.count("graph_captures")
        if getattr(args[0], "graph_pool", None) is not None:
            _seen.count("graph_captures_shared_pool")

    _wrap(graphs.Graph, "capture_begin", before=captured)


def _patch_memory(memory):
    def pooled(args, kwargs):     # MemPool.__init__(self, allocator=None, ...)
        _seen.count("mem_pools")
        if _argument(args, kwargs, "allocator", 1) is not None:
            _seen.count("mem_pools_custom_allocator")

    if hasattr(memory, "MemPool"):
        _wrap(memory.MemPool, "__init__", before=pooled)
    if hasattr(memory, "use_mem_pool"):
        _wrap(memory, "use_mem_pool", before=lambda args, kwargs: _seen.count("mem_pool_uses"),
              aliases=("torch.cuda",))


def _patch_reductions(reductions):
    def sent(args, kwargs):       # reduce_tensor(tensor)
        _seen.count(_argument(args, kwargs, "tensor", 0).device.type, _seen.ipc_sent)

    def received_cpu(args, kwargs):   # rebuild_tensor(cls, storage, metadata)
        _seen.count(getattr(getattr(_argument(args, kwargs, "storage", 1), "device", None), "type", "cpu"),
                    _seen.ipc_received)

    wrapped = _wrap(reductions, "reduce_tensor", before=sent)
    _wrap(reductions, "rebuild_tensor", before=received_cpu)
    _wrap(reductions, "rebuild_cuda_tensor", before=lambda args, kwargs: _seen.count("cuda", _seen.ipc_received))
    if wrapped:   # reducers registered before this patch (torch imported before install) now point to it
        from multiprocessing.reduction import ForkingPickler

        original, wrapper = wrapped
        reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]  # private: not in the stubs
        for kind, reducer in list(reducers.items()):
            if reducer is original:
                reducers[kind] = wrapper


def _patch_c10d(c10d):
    def made(group):
        backend = str(c10d.get_backend(group))
        with _seen.lock:
            _seen.process_groups.append(backend)
            if "nccl" in backend and _seen.nccl_env is None:
                _seen.nccl_env = {k: os.environ[k] for k in NCCL_VARIABLES if k in os.environ}

    def grouped(group, args, kwargs):   # ranks outside a new group get a placeholder with no backend
        if group is not None and group is not getattr(c10d.GroupMember, "NON_GROUP_MEMBER", None):
            made(group)

    _wrap(c10d, "init_process_group", after=lambda result, args, kwargs: made(None),
          aliases=("torch.distributed",))
    _wrap(c10d, "new_group", after=grouped, aliases=("torch.distributed",))
    nccl = getattr(c10d, "ProcessGroupNCCL", None)   # CUDA builds only
    if nccl is not None and hasattr(nccl, "register_mem_pool"):
        _wrap(nccl, "register_mem_pool", before=lambda args, kwargs: _seen.count("nccl_mem_pool_registrations"))


PATCHES = {
    "torch": _patch_torch,
    "torch.cuda.graphs": _patch_graphs,
    "torch.accelerator.graphs": _patch_accelerator_graphs,
    "torch.cuda.memory": _patch_memory,
    "torch.multiprocessing.reductions": _patch_reductions,
    "torch.distributed.distributed_c10d": _patch_c10d,
}
