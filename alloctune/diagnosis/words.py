"""A diagnosis in words, the one place they are made: a verdict's summary, reasons, next steps and notes from its
cause and the figures it quotes (`facts.py`), what the replay of the failed run adds to the steps, and what the
table of known problems holds for the setting they recommend (in the table's own words, `settings/known.py`)."""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from ..settings.known import SEVERITY_WORDS, Feature, Problem, Severity, Versions, features_phrase
from ..units import MiB, format_bytes as fb
from .facts import CONTEXT_ESTIMATE, Basis, Cause, Check, Figures, Inconsistent, Known, Limit, Recommendation, OomFacts

_KNOWN = {
    Known.LISTED: "listed in the message",
    Known.NVML: "card total - free - this process",
    Known.ESTIMATED: f"card total - free - reserved - {fb(CONTEXT_ESTIMATE)} for the CUDA context",
    Known.WITHIN_SLACK: "not known: the message lists no processes, and the card's total less its free memory and "
                        "this process's cache is within what the CUDA context and the driver take",
    Known.UNKNOWN: "unknown",
}


def _size_arg(n: int | None) -> str:
    """A size as a CLI argument, exact (a command run as printed replays the run's own limit): MiB where whole,
    else bytes."""
    return f"{(n or 0) // MiB}MiB" if not (n or 0) % MiB else str(n)


def heading(cause: Cause, sure: bool) -> str:
    """What heads the verdict's summary: its cause."""
    return f"Verdict ({cause}{'' if sure else ', within the rounding of the figures'})"


# What PyTorch could have had of the card, which a shortage is measured against: its cache and the free memory (the
# card less the others and the context differs by the driver's share, and could say the opposite); the rest of what
# this process held is outside PyTorch's cache
_PYTORCH_COULD = "PyTorch could have (its cache + what was free)"


def summary(cause: Cause, g: Figures) -> str:
    f = g.facts
    if cause is Cause.OTHER_PROCESSES:
        return f"Other processes hold {fb(g.others)} of this GPU; without them the request would have fit."
    if cause is Cause.SHORTAGE and _outside_covers(g):
        return (f"A shortage of PyTorch's share: the live tensors ({fb(f.allocated)}) plus the request "
                f"({fb(f.requested)}) do not fit in the {fb(f.reserved + f.free)} {_PYTORCH_COULD}, while "
                f"{_held_outside(f)}: more than the {fb(g.shortfall)} the request lacked.")
    if cause is Cause.SHORTAGE and g.shortfall:
        return (f"A true shortage: the live tensors ({fb(f.allocated)}) plus the request ({fb(f.requested)}) do not "
                f"fit in the memory {_PYTORCH_COULD} of this GPU.")
    if cause is Cause.SHORTAGE:   # the figures leave room (within their rounding, or taken meanwhile): at the limit
        return (f"A shortage at the limit: the live tensors ({fb(f.allocated)}) plus the request ({fb(f.requested)}) "
                f"come within {fb(f.unallocated + f.free - f.requested)} of all {_PYTORCH_COULD} of this GPU, "
                "with nothing cached to give back.")
    if cause is Cause.BUDGET:
        return (f"The memory budget is the limit: the job needs {fb(f.allocated + f.requested)} now, "
                f"{fb(f.allowed)} is allowed, and the card had room.")
    if cause is Cause.GRAPH_POOLS:
        return (f"CUDA graph pools hold the memory: {fb(f.graph_pools_free)} of the {fb(f.unallocated)} reserved but "
                f"unused was free inside CUDA graphs' private pools, which this request could not use and which are "
                f"not released while their graphs live; without them the {fb(f.requested)} request would have fit.")
    enough = ("enough for" if f.unallocated >= f.requested
              else f"with the {fb(f.device_free)} free on the card enough for")
    return (f"Cached, fragmented memory: {fb(f.unallocated)} was reserved but unused, {enough} the "
            f"{fb(f.requested)} request, yet in pieces too small for it.")


def notes(cause: Cause, g: Figures) -> list[str]:
    """What the verdict says beside its cause: a budget in force, and what other processes held (a reason of its
    own where they are the cause)."""
    f, out = g.facts, []
    if f.allowed is not None and f.device_total:
        out.append(f"a memory budget is in force: {fb(f.allowed)} allowed of the card's {fb(f.device_total)} "
                   f"({f.allowed / f.device_total:.3f} of it)")
    if f.graph_pools_free > f.tolerance and cause is not Cause.GRAPH_POOLS:
        out.append(f"{fb(f.graph_pools_free)} of the unused cache was free in CUDA graphs' private pools, kept for "
                   "their graphs: no other request could use it")
    if f.beyond_context is not None:
        out.append(f"{_held_outside(f)} (NVML's figure for it less PyTorch's), more than a CUDA context takes: what "
                   "is outside PyTorch's cache (the CUDA context, cuBLAS and cuDNN handles, loaded kernels, NCCL's "
                   "buffers, the allocations of another library: CuPy, JAX, TensorFlow, TensorRT), which no "
                   "allocator setting gives back")
    if cause is Cause.OTHER_PROCESSES:
        return out
    if g.others and g.others > f.tolerance:
        out.append(f"other processes held {fb(g.others)} of the card ({_KNOWN[g.known]})")
    elif g.others is None and g.known is Known.WITHIN_SLACK:
        out.append(f"the memory other processes held is {_KNOWN[g.known]}")
    return out


def _held_outside(f: OomFacts) -> str:
    """What the process held beyond PyTorch's cache, by NVML's figure for it or for the process taken to be it."""
    who = "this process" if f.guessed_pid is None else (f"process {f.guessed_pid}, if it is this one (the message "
                                                         "does not say which is),")
    return f"{who} held {fb(f.non_pytorch)} beyond PyTorch's {fb(f.reserved)}"


def _outside_covers(g: Figures) -> bool:
    """Whether what the process held beyond PyTorch's cache and a CUDA context covers a shortage's shortfall: memory
    libraries in the process took (JAX, TensorFlow...), without which the request would have fit."""
    beyond = g.facts.beyond_context
    return bool(g.shortfall) and beyond is not None and beyond >= (g.shortfall or 0)


def reasons(cause: Cause, g: Figures) -> list[str]:
    return _REASONS[cause](g)


def steps(cause: Cause, g: Figures, *, suggestion: bool = True) -> list[str]:
    """The verdict's next steps: the setting it suggests trying first (unless `suggestion` is False: a diagnosis
    says its recommendation itself, `recommendation_step`), then the cause's own."""
    first = [_suggestion(g.suggested_conf, g.facts.expandable_segments)] if suggestion and g.suggested_conf else []
    return first + _STEPS[cause](g)


_CHECKED = {
    Check.NEGATIVE: "a negative size ({figure})",
    Check.NOTHING_REQUESTED: "it tried to allocate 0 bytes, which never fails",
    Check.NO_CARD: "the card's total is 0 bytes",
    Check.FREE_OVER_TOTAL: "{figure} free on a card of {limit}",
    Check.RESERVED_OVER_TOTAL: "{figure} reserved by PyTorch on a card of {limit}",
    Check.HELD_OVER_TOTAL: "{figure} reserved by PyTorch and free on the card together, on a card of {limit}",
    Check.ALLOCATED_OVER_RESERVED: "{figure} allocated, more than the {limit} PyTorch reserved to hold it",
    Check.ALLOWED_OVER_TOTAL: "{figure} allowed, more than the card's {limit}",
    Check.PROCESSES_OVER_TOTAL: "{figure} in use by the processes listed, on a card of {limit}",
    Check.POOLS_OVER_UNALLOCATED: "{figure} free in CUDA graph pools, more than the {limit} reserved but unallocated",
}


def impossible(found: Sequence[Inconsistent], source: str, rank: int | None) -> str:
    """Why the figures of an OOM in `source` (of `rank`, where a launcher named one) are refused: one line."""
    where = f"{source} (rank {rank})" if rank is not None else source
    return (f"{where}: figures no allocator's state has, so no cause can be read from them: "
            + "; ".join(_CHECKED[i.check].format(figure=fb(i.figure), limit=fb(i.limit)) for i in found)
            + ". Is the message edited, cut or pieced together from two? Give it as torch printed it, or a memory "
              "snapshot (`alloctune.dump_on_oom(\"oom/\")` writes one at the next OOM)")


def other_oom(sources: str, snapshot_requested: int, requested: Sequence[int]) -> str:
    """Why a snapshot and a message of two different OOMs are refused (`requested`: what each OOM of the message
    source tried to allocate): one line."""
    return (f"{sources}: the snapshot's OOM tried to allocate {fb(snapshot_requested)}, the message's "
            f"{', '.join(fb(r) for r in requested)}: two different OOMs, whose figures cannot be read together. Give "
            "the message printed at the snapshot's OOM (dump_on_oom writes it beside the snapshot), or either alone")


def stale_message(beside: str, snapshot_requested: int, requested: int) -> str:
    """What diagnose says of the message beside a snapshot that is of another OOM, which it leaves out."""
    return (f"{beside} is not this snapshot's OOM (it tried to allocate {fb(requested)}, the snapshot's "
            f"{fb(snapshot_requested)}): left from an earlier OOM, as dump_on_oom writes the message only of an OOM "
            "nobody caught; the snapshot is diagnosed alone")


def _other_processes_reasons(g: Figures) -> list[str]:
    f = g.facts
    listed = ", ".join(f"{pid}: {fb(b)}" for pid, b in f.processes)
    return [f"the request {fb(f.requested)} against this process's unused cache {fb(f.unallocated)} plus the "
            f"{fb(f.free)} free on the card" + (f": {fb(g.shortfall)} short" if g.shortfall else ""),
            f"other processes held {fb(g.others)} ({_KNOWN[g.known]}{': ' + listed if listed else ''}), more than "
            + ("the shortfall" if not g.dominant else f"this job's live tensors ({fb(f.allocated)})")]


def _other_processes_steps(g: Figures) -> list[str]:
    f = g.facts
    return ["free the GPU or use another: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` "
            "lists who holds it; CUDA_VISIBLE_DEVICES picks an idle GPU",
            f"the job itself needs {fb(f.allocated + f.requested)} live here; no allocator setting makes up for "
            "memory that other processes hold"]


def _shortage_reasons(g: Figures) -> list[str]:
    f, shortfall = g.facts, g.shortfall or 0
    q, a = f.requested, f.allocated
    card = f" of the {fb(f.device_total)} card" if f.device_total else ""
    out = [f"live tensors {fb(a)} + the request {fb(q)} = {fb(a + q)}"
           + (f", {fb(shortfall) + ' more than' if shortfall else 'within'} the {fb(f.reserved + f.device_free)} "
              f"{_PYTORCH_COULD}{card}" if f.device_free is not None else ""),
           f"unused cache {fb(f.unallocated)} + free {fb(f.free)}"
           + (f" fall {fb(shortfall)} short of the request" if shortfall else
              " would cover the request, but the cache is nearly empty: the allocation rounded up to a whole "
              "segment did not fit, or the memory was taken meanwhile")]
    if f.device_total and q > f.device_total:
        out.append(f"the single request {fb(q)} is larger than the whole card")
    return out


def _shortage_steps(g: Figures) -> list[str]:
    f = g.facts
    fewer = max(g.shortfall or 0, f.requested - f.free)
    # more than the shortfall where the unused cache cannot be counted on to hold the request: said so
    why = (f", the request less the free memory: the {fb(f.unallocated)} unused cache may lie in pieces too small "
           "for it" if fewer > (g.shortfall or 0) and f.unallocated > f.tolerance else "")
    hold = (f"hold less at once{f': at least {fb(fewer)} fewer bytes live{why}' if fewer > 0 else ''} (smaller "
            "batches or sequences, activation checkpointing, lower precision, sharding or offloading)")
    if _outside_covers(g):   # a larger card would not help a library that takes a share of any card
        guess = f" (if process {f.guessed_pid} is this one)" if f.guessed_pid is not None else ""
        return [f"free at least {fb(g.shortfall)} of the {fb(f.non_pytorch)} this process held outside PyTorch's "
                f"cache{guess}, or keep its libraries from taking it up front: JAX takes 75% of the card at start "
                "(XLA_PYTHON_CLIENT_PREALLOCATE=false, or a smaller XLA_PYTHON_CLIENT_MEM_FRACTION), TensorFlow "
                "nearly all of it unless memory growth is on (tf.config.experimental.set_memory_growth), CuPy keeps "
                "what it freed in its pool (cupy.get_default_memory_pool().free_all_blocks()), another library's "
                "pool has a limit or a release call of its own",
                f"or {hold}",
                "an allocator setting cannot help: the memory the request lacked is held outside PyTorch's cache"]
    return [hold,
            "or a larger card: `alloctune replay TRACE --min-memory` gives the smallest that fits, per setting",
            "an allocator setting cannot help: the live tensors themselves do not fit" if g.shortfall else
            "an allocator setting cannot help: nothing was cached to give back or to lay out otherwise"]


def _budget_reasons(g: Figures) -> list[str]:
    f = g.facts
    needed = f.allocated + f.requested
    return [f"live tensors {fb(f.allocated)} + the request {fb(f.requested)} = {fb(needed)}, "
            f"{'more than' if needed > (f.allowed or 0) else 'at'} the {fb(f.allowed)} allowed"
            + ("" if f.unallocated > f.tolerance else ", with no cached memory left to blame"),
            (f"the card had {fb(f.device_free)} free beyond this process's {fb(f.reserved)}: it had room"
             if g.card_room is not None else "the message does not say how much of the card was free")]


def _budget_steps(g: Figures) -> list[str]:
    f = g.facts
    needed = f.allocated + f.requested
    frac = f"{needed / f.device_total:.3f}" if f.device_total else None
    return [f"raise the budget above {fb(needed)}"
            + (f" (torch.cuda.set_per_process_memory_fraction({frac}) or, on torch >= 2.10, "
               f"PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:{frac}; more for headroom)" if frac else ""),
            "or make the job need less under this budget: `alloctune sweep WORKLOAD --budget "
            f"{_size_arg(f.allowed)}` measures the settings, then `alloctune export RESULTS`"]


def _fragmentation_reasons(g: Figures) -> list[str]:
    f = g.facts
    q, a, u = f.requested, f.allocated, f.unallocated
    limit = f"the budget ({fb(f.allowed)})" if g.limit is Limit.BUDGET else f"what {_PYTORCH_COULD} of the card"
    out = [f"live tensors {fb(a)} + the request {fb(q)} = {fb(a + q)} fit within {limit} ({fb(g.margin)} to spare)",
           f"{fb(u)} was reserved by PyTorch but unallocated: free pieces inside segments that also hold live "
           "tensors, so the allocator could neither use them for this request nor give them back"]
    if f.largest_free_block is not None:
        out.append(f"the largest free block was {fb(f.largest_free_block)}, smaller than the request")
    return out


def _suggestion(conf: str | None, expandable_segments: bool) -> str:
    """The untested setting a fragmentation verdict suggests trying, and why it helps."""
    if expandable_segments:
        return (f"try PYTORCH_CUDA_ALLOC_CONF={conf} (memory is mapped page by page, so free pages "
                "between live tensors are given back and reused)")
    # expandable segments came with torch 2.1
    return (f"try PYTORCH_CUDA_ALLOC_CONF={conf} (cached blocks above 512 MiB are not split, so "
            "large requests find them whole); this torch (2.0 or older) has no expandable_segments, which "
            "torch 2.1 and later offer for this")


def _fragmentation_steps(g: Figures) -> list[str]:
    f = g.facts
    budget = f" --budget {_size_arg(f.allowed)}" if f.allowed is not None else ""
    confs = ("--conf expandable_segments:True --conf max_split_size_mb:512" if f.expandable_segments
             else "--conf max_split_size_mb:512 --conf max_split_size_mb:128")
    return [f"check it offline on a snapshot (alloctune.dump_on_oom): `{g.replay_hint}{budget} {confs}`, or measure "
            f"the settings: `alloctune sweep WORKLOAD{budget}`, then `alloctune export RESULTS`"]


def _graph_pools_reasons(g: Figures) -> list[str]:
    f = g.facts
    q, a, p = f.requested, f.allocated, f.graph_pools_free
    limit = f"the budget ({fb(f.allowed)})" if g.limit is Limit.BUDGET else f"what {_PYTORCH_COULD} of the card"
    rest = (f"without it, live tensors + the pools' free memory + the request = {fb(a + p + q)}, more than the budget"
            if g.limit is Limit.BUDGET else
            f"without it, the unused cache left ({fb(f.unallocated - p)}) plus the {fb(f.free)} free on the card "
            f"fall {fb(q - (f.unallocated - p) - f.free)} short of the request")
    return [f"live tensors {fb(a)} + the request {fb(q)} = {fb(a + q)} fit within {limit} ({fb(g.margin)} to spare)",
            f"{fb(p)} of the {fb(f.unallocated)} reserved but unallocated was free in private pools (\"allocated in "
            "private pools (e.g., CUDA Graphs)\"): only captures into those pools can use it, and the allocator "
            "releases it neither on empty_cache nor before an OOM while a graph uses the pool", rest]


def _graph_pools_steps(g: Figures) -> list[str]:
    return ["let go of the graphs no longer replayed (`del graph` or `graph.reset()`, then "
            "`torch.cuda.empty_cache()`): a pool is released once its last graph is gone",
            "or share one pool between graphs that do not run at once (`torch.cuda.graph(g, pool=other.pool())`, "
            "`make_graphed_callables(..., pool=torch.cuda.graph_pool_handle())`); under "
            "`torch.compile(mode=\"reduce-overhead\")` every new input shape records another graph: fewer shapes "
            "(padding to buckets) mean fewer graphs",
            "an allocator setting changes how the pools' memory is laid out, not whether it is kept: `alloctune "
            "record -- CMD` records the captures, and `alloctune replay TRACE` compares the settings on them"]


_REASONS: dict[Cause, Callable[[Figures], list[str]]] = {
    Cause.OTHER_PROCESSES: _other_processes_reasons, Cause.SHORTAGE: _shortage_reasons,
    Cause.BUDGET: _budget_reasons, Cause.FRAGMENTATION: _fragmentation_reasons, Cause.GRAPH_POOLS: _graph_pools_reasons}
_STEPS: dict[Cause, Callable[[Figures], list[str]]] = {
    Cause.OTHER_PROCESSES: _other_processes_steps, Cause.SHORTAGE: _shortage_steps,
    Cause.BUDGET: _budget_steps, Cause.FRAGMENTATION: _fragmentation_steps, Cause.GRAPH_POOLS: _graph_pools_steps}


def recommendation_step(rec: Recommendation, g: Figures) -> str:
    """The setting a diagnosis recommends, the first of its next steps."""
    if rec.basis is Basis.VERDICT:
        return _suggestion(rec.conf, g.facts.expandable_segments)
    return (f"by replay, PYTORCH_CUDA_ALLOC_CONF={rec.conf} would have avoided this OOM (peak reserved "
            f"{fb(rec.peak_reserved)}); confirm it in a real run")


NONE_FITTED = "by replay, no setting tried would have avoided this OOM"


def oom_where(rank: int | None, gpu: int | None) -> str:
    """Where an OOM happened: 'GPU 1 (rank 1)', as far as its source says."""
    device = f"GPU {gpu}" if gpu is not None else "the GPU"
    return f"{device} (rank {rank})" if rank is not None else device


def oom_heading(rank: int | None, f: OomFacts) -> str:
    return f"OOM on {oom_where(rank, f.gpu)}: tried to allocate {fb(f.requested)}"


# How many OOMs of a source that holds several are listed one a line: a job that caught OOMs and ran on (fairseq
# recovers from each) leaves hundreds; the rest are counted by cause, and `--json`'s ooms holds every one
SHOWN_OOMS = 8


def several(ooms: list[tuple[int | None, OomFacts, Cause, bool]], of_snapshot: bool) -> list[str]:
    """The OOMs of a source that holds several (rank, figures, cause, whether the verdict below details it each):
    the heading, which says why the detailed one is (the snapshot's, where one is given; else the worst), then one
    line each, up to SHOWN_OOMS (the detailed one always), then how many more of each cause."""
    listed = [i for i, o in enumerate(ooms) if i < SHOWN_OOMS or o[3]]
    if len(listed) > SHOWN_OOMS:   # the detailed one comes after the first SHOWN_OOMS: in the last one's place
        listed = listed[:SHOWN_OOMS - 1] + listed[-1:]
    shown = [ooms[i] for i in listed]
    rest = [o[2] for i, o in enumerate(ooms) if i not in listed]
    more = ", ".join(f"{rest.count(c)} {c}" for c in dict.fromkeys(rest))
    which = ("the one the snapshot shows is detailed below" if of_snapshot else "the worst is detailed below (a "
             "cause no allocator setting fixes first, then the one that needs the most memory)")
    return ([f"{len(ooms)} OOMs read; {which}:"]
            + [f"{oom_where(r, g.gpu)}: tried to allocate {fb(g.requested)} with {fb(g.allocated)} live: {cause}"
               + (" (detailed below)" if detailed else "") for r, g, cause, detailed in shown]
            + ([f"and {len(rest)} more ({more}): `--json`'s ooms lists every one"] if rest else []))


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
            said.append(f"it can {SEVERITY_WORDS[severity]} " + "; or ".join(
                always + did + (["if the job " + "; or if it ".join(when)] if when else [])))
    more = f"{hidden} more (`alloctune diagnose --all-problems` lists them)" if hidden else ""
    return (f"before using {conf}, check the job against its known problems on {where}: "
            + "; ".join(said + ([f"and {more}"] if more and said else [more] if more else [])))
