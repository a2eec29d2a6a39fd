"""The table of known problems (`settings/known.py`) in words: what a job did, as the start-up hook saw it
(`FEATURES`, `features_phrase`), the problems of a setting that matter for a job (`known_problems_line`, for
`diagnose`), and a KNOWN_PROBLEM or KNOWN_CAVEAT reason's sentence (`known_problem`, for `words.py`).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..decide.reasons import KnownProblem
from ..settings.known import PROBLEMS, Feature, Problem, Severity, Versions

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


def known_problems_line(conf: str, torch_version: str | None, versions: Versions | None, shown: Sequence[Problem],
                        hidden: int = 0, seen: Iterable[Feature] = ()) -> str:
    """What the table of known problems holds for `conf` on `torch_version` (None: `versions`, the releases the
    message's layout names; both None: any), for a job that was seen doing `seen`: the problems `shown`, by
    severity, what the job would have to do for each to apply (or that it did), and its source; then how many more
    are `hidden`."""
    where = (f"torch {torch_version}" if torch_version else f"torch {versions} (as the message's layout tells)"
             if versions else "any torch (the source does not say which)")
    if not shown and not hidden:
        return f"alloctune's table of known problems has none for {conf} on {where}"
    done = frozenset(seen)
    said = []
    for severity in Severity:
        ours = [p for p in shown if p.severity is severity]
        always = [f"whatever the job does ({p.source})" for p in ours if not p.when]
        did = [f"as the job {features_phrase(f for f in Feature if f in p.when)} ({p.source})"
               for p in ours if p.when and p.when <= done]
        when = [f"{features_phrase(f for f in Feature if f in p.when)} ({p.source})"
                for p in ours if p.when and not p.when <= done]
        if always or did or when:
            said.append(f"it can {_SEVERITY[severity]} " + "; or ".join(
                always + did + (["if the job " + "; or if it ".join(when)] if when else [])))
    more = f"{hidden} more (`alloctune diagnose --all-problems` lists them)" if hidden else ""
    return (f"before using {conf}, check the job against its known problems on {where}: "
            + "; ".join(said + ([f"and {more}"] if more and said else [more] if more else [])))


def known_problem(f: KnownProblem, head: str = "") -> str:
    """A setting's known problem for this job on its torch, as a reason says it, after `head`."""
    torch = f" on torch {f.torch_version}" if f.torch_version else " (its torch unknown: every version counted)"
    used = f"; the job {features_phrase(f.features)}" if f.features else ""
    return f"{head}known to {_SEVERITY[f.severity]}{torch} ({f.problem}{used}): {_BY_ID[f.problem].reason}"
