"""The table of known problems (`settings/known.py`) in words: what a job did, as the start-up hook saw it
(`FEATURES`, `features_phrase`), what the table holds for a setting on a torch (`known_problems_line`, for
`diagnose`), and a KNOWN_PROBLEM or KNOWN_CAVEAT reason's sentence (`known_problem`, for `words.py`).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..decide.reasons import KnownProblem
from ..settings.known import PROBLEMS, Feature, Problem, Severity

# What a job did, as the start-up hook saw it: "the job <phrase>".
FEATURES = {
    Feature.CUDA_GRAPHS: "captured CUDA graphs",
    Feature.GRAPH_SHARED_POOL: "shared a memory pool between CUDA graph captures",
    Feature.COMPILE_CUDAGRAPHS: "asked torch.compile for CUDA graphs",
    Feature.CUDA_IPC: "sent or received CUDA tensors between processes",
    Feature.MEM_POOL: "used torch.cuda.MemPool",
    Feature.MEM_POOL_CUSTOM_ALLOCATOR: "gave a MemPool its own allocator",
    Feature.NCCL: "ran an NCCL process group",
    Feature.NCCL_GRAPH_REGISTRATION: "left NCCL_GRAPH_REGISTER on, NCCL's default",
    Feature.NCCL_USER_BUFFERS: "registered NCCL user buffers",
    Feature.RUNTIME_ALLOCATOR_CHANGE: "changed allocator settings at run time",
    Feature.UNREAD_VARIABLE: "set an allocator variable its torch did not read",
    Feature.VLLM: "imported vllm",
    Feature.TORCH_MEMORY_SAVER: "imported torch_memory_saver",
}
_SEVERITY = {Severity.BROKEN: "break the job", Severity.WASTEFUL: "waste memory",
             Severity.INEFFECTIVE: "take no effect (in part or whole)"}
_BY_ID = {p.id: p for p in PROBLEMS}


def features_phrase(features: Iterable[Feature]) -> str:
    """'captured CUDA graphs and ran an NCCL process group'."""
    said = [FEATURES[f] for f in features]
    return ", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 else "".join(said)


def known_problems_line(conf: str, torch_version: str | None, found: Sequence[Problem]) -> str:
    """What the table of known problems holds for `conf` on `torch_version` (None: unknown, every version), for a
    job whose features are not known: by severity, what the job would have to do for each to apply, and its
    source."""
    where = f"torch {torch_version}" if torch_version else "any torch (which one is not known)"
    if not found:
        return f"alloctune's table of known problems has none for {conf} on {where}"
    said = []
    for severity in Severity:
        ours = [p for p in found if p.severity is severity]
        always = [f"whatever the job does ({p.source})" for p in ours if not p.when]
        when = [f"{features_phrase(f for f in Feature if f in p.when)} ({p.source})" for p in ours if p.when]
        if always or when:
            said.append(f"it can {_SEVERITY[severity]} " + "; or ".join(
                always + (["if the job " + "; or if it ".join(when)] if when else [])))
    return f"alloctune's table of known problems, for {conf} on {where}, to check against the job: " + "; ".join(said)


def known_problem(f: KnownProblem, head: str = "") -> str:
    """A setting's known problem for this job on its torch, as a reason says it, after `head`."""
    torch = f" on torch {f.torch_version}" if f.torch_version else " (its torch unknown: every version counted)"
    used = f"; the job {features_phrase(f.features)}" if f.features else ""
    return f"{head}known to {_SEVERITY[f.severity]}{torch} ({f.problem}{used}): {_BY_ID[f.problem].reason}"
