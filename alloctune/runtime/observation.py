"""One process's observation of its allocator-sensitive features: the record `runtime/features.py` fills in inside
the job and the hook writes in its report, and the libraries of note it looks for. The parent reads it back
(`typed.from_json(Observation, ...)`) and says which `known.Feature`s it shows (`trial/features.py`)."""
from __future__ import annotations

from dataclasses import dataclass, field

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
