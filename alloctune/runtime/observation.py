"""One process's observation of its allocator-sensitive features (`runtime/features.py` writes it inside the job),
as the parent reads it back (`typed.from_json(Observation, ...)`), and the `known.Feature`s it shows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..settings.known import Feature

# Libraries of note, by module name, when imported: the table has problems that only they cause.
LIBRARIES = {"vllm": Feature.VLLM, "torch_memory_saver": Feature.TORCH_MEMORY_SAVER}


@dataclass(frozen=True)
class CompileCall:
    mode: str | None       # torch.compile's mode (None: not given)
    backend: str | None    # its backend by name (None: the default, or a callable)
    cudagraphs: bool          # the mode, options or backend ask for CUDA graphs


@dataclass(frozen=True)
class Observation:
    torch_version: str | None = None                 # None: the process never imported torch
    graph_captures: int = 0                             # CUDA graph captures begun
    graph_captures_shared_pool: int = 0                 # ... given a pool to share
    graph_pool_handles: int = 0                         # graph_pool_handle() calls
    ipc_sent: dict[str, int] = field(default_factory=dict)      # tensors sent to other processes, by device type
    ipc_received: dict[str, int] = field(default_factory=dict)  # ... received from them
    mem_pools: int = 0                                  # torch.cuda.MemPool objects made
    mem_pools_custom_allocator: int = 0                 # ... with their own allocator
    mem_pool_uses: int = 0                              # use_mem_pool() calls
    process_groups: tuple[str, ...] = ()                # each group's backend, in creation order
    nccl_env: dict[str, str] | None = None           # registration variables at the first NCCL group
    nccl_mem_pool_registrations: int = 0                # ProcessGroupNCCL.register_mem_pool calls
    compile_calls: tuple[CompileCall, ...] = ()         # distinct torch.compile calls
    inductor_cudagraphs: bool | None = None          # inductor's global triton.cudagraphs at exit
    allocator_changes: tuple[str, ...] = ()             # settings given at run time, distinct, in order
    alloc_conf_env: dict[str, str] = field(default_factory=dict)   # PYTORCH_*ALLOC_CONF at start-up
    alloc_conf_env_at_cuda_init: dict[str, str] | None = None    # ... when CUDA initialised (None: never)
    variable_read: str | None = None                 # the variable this torch took its setting from
    unread_variables: tuple[str, ...] = ()              # allocator variables set that it did not use
    libraries: tuple[str, ...] = ()                     # LIBRARIES imported
    failures: tuple[str, ...] = ()                      # watches that could not be installed or failed


def used(observation: Observation) -> frozenset[Feature]:
    """The features one process showed."""
    o = observation
    nccl = any("nccl" in backend for backend in o.process_groups)
    env = o.nccl_env or {}
    found = {
        Feature.CUDA_GRAPHS: o.graph_captures > 0,
        Feature.GRAPH_SHARED_POOL: o.graph_captures_shared_pool > 0 or o.graph_pool_handles > 0,
        Feature.COMPILE_CUDAGRAPHS: any(c.cudagraphs for c in o.compile_calls) or bool(o.inductor_cudagraphs),
        Feature.CUDA_IPC: o.ipc_sent.get("cuda", 0) > 0 or o.ipc_received.get("cuda", 0) > 0,
        Feature.MEM_POOL: o.mem_pools > 0 or o.mem_pool_uses > 0,
        Feature.MEM_POOL_CUSTOM_ALLOCATOR: o.mem_pools_custom_allocator > 0,
        Feature.NCCL: nccl,
        # NCCL registers captured collectives' buffers unless NCCL_GRAPH_REGISTER=0 (its default is on)
        Feature.NCCL_GRAPH_REGISTRATION: nccl and env.get("NCCL_GRAPH_REGISTER", "").strip() != "0",
        Feature.NCCL_USER_BUFFERS: nccl and (_on(env.get("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"))
                                             or o.nccl_mem_pool_registrations > 0),
        Feature.RUNTIME_ALLOCATOR_CHANGE: bool(o.allocator_changes),
        Feature.UNREAD_VARIABLE: bool(o.unread_variables),
    }
    libraries = {LIBRARIES[name] for name in o.libraries if name in LIBRARIES}
    return frozenset({feature for feature, seen in found.items() if seen} | libraries)


def used_by_job(observations: Iterable[Observation]) -> frozenset[Feature]:
    """The features of a job: those any of its processes showed."""
    return frozenset().union(*(used(o) for o in observations))


def _on(value: str | None) -> bool:
    """A boolean variable as torch reads it (c10d's getCvarBool): on for y, yes, 1, t, true in any case."""
    return value is not None and value.lower() in ("y", "yes", "1", "t", "true")
