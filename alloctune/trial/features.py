"""The allocator-sensitive features a command's processes showed, read back on the parent's side: each process's
observation (`runtime/observation.Observation`, which `runtime/features.py` records inside the job and the hook
writes in its report) as the `known.Feature`s it shows (`used`), and a job's as those any of its processes showed
(`used_by_job`, `job_features`)."""
from __future__ import annotations

from typing import Iterable, Sequence

from ..results.typed import from_json
from ..runtime.observation import LIBRARIES, Observation
from ..runtime.peaks import ProcessReport, report_path
from ..settings.known import Feature


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


def job_features(procs: str, processes: Sequence[ProcessReport]) -> list[str] | None:
    """The features (`known.Feature` values, sorted) that any process used, as the hook observed them in the folder
    `procs`; None when no process's observation was written. ResultsError naming the file for an observation that
    does not read."""
    observations = [from_json(Observation, p.features, report_path(procs, p.pid) + ": features")
                    for p in processes if p.features is not None]
    return sorted(f.value for f in used_by_job(observations)) if observations else None


def _on(value: str | None) -> bool:
    """A boolean variable as torch reads it (c10d's getCvarBool): on for y, yes, 1, t, true in any case."""
    return value is not None and value.lower() in ("y", "yes", "1", "t", "true")
