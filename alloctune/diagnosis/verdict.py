"""Which of four causes an out-of-memory error had, from the figures at the moment it happened (pure).

The allocator gives up only after it has released every cached segment that holds no live tensor, so the
"reserved but unallocated" memory a message or snapshot shows is free space stuck inside segments that still
hold live tensors. With A allocated (live tensors, rounded), U = reserved - A, F free on the device,
Q requested and L allowed (memory fraction), in this order:

1. budget-bound (L set, and reserved + Q > L: the allocator refused before asking CUDA):
   - A + Q <= L: **fragmentation**: the tensors and the request fit the budget; the cache's free pieces
     (U in total) are each smaller than Q.
   - else, if the card had room (A + Q <= reserved + F): **budget**: the budget is below what the job needs.
2. device-bound:
   - other processes hold more than this job's live tensors and its request: **other processes** (they
     dominate the card; freeing them is the plain fix whatever the cache holds);
   - Q <= U + F: **fragmentation**: what this process held unused plus what was free covers the request;
   - else, if memory held by other processes covers the shortfall (Q - U - F): **other processes**;
   - else **shortage**: the live tensors alone do not fit.
Fragmentation needs a cache: with U (about) 0, a failure at the limit is the limit (budget or shortage).

Figures read from a message are rounded (`precision` each; a margin sums up to three of them); a verdict whose
deciding margin is within that rounding says so (`sure` False).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..units import MiB, format_bytes

SHORTAGE, FRAGMENTATION, OTHER_PROCESSES, BUDGET = "shortage", "fragmentation", "other-processes", "budget"
EXPANDABLE = "expandable_segments:True"   # what fragmentation suggests trying
SPLIT_LIMIT = "max_split_size_mb:512"      # what it suggests to a torch older than 2.1, which has no EXPANDABLE
# What the CUDA context and libraries hold per process, when nothing measured it: 755-783 MiB on the H200
# (torch 2.11), the rest of the 1.36 GiB between nvidia-smi's and torch's totals being the driver's own.
CONTEXT_ESTIMATE = 1024 * MiB
# nvidia-smi's total exceeds torch's by the driver's reservation (615 MiB on the H200): an estimate of other
# processes' memory below this is that, not a process
DRIVER_SLACK = 512 * MiB


@dataclass(frozen=True)
class OomFacts:
    """The figures at the OOM, in bytes, from a message or a snapshot; None where the source does not say."""

    requested: int
    allocated: int
    reserved: int
    device_free: int | None = None
    device_total: int | None = None
    allowed: int | None = None
    this_process: int | None = None                 # NVML's figure for this process (CUDA context included)
    processes: tuple[tuple[int, int], ...] = ()     # other processes on the GPU: (pid, bytes)
    largest_free_block: int | None = None           # in the pool the request needed (snapshot only)
    precision: int = 0                              # rounding of the figures
    gpu: int | None = None
    expandable_segments: bool = True                # the failing torch has them (2.1+; False: 2.0 and older)

    @property
    def unallocated(self) -> int:
        return self.reserved - self.allocated

    @property
    def free(self) -> int:
        """Free on the card, none where the source does not say: what the request could still have had."""
        return self.device_free if self.device_free is not None else 0

    def others_bytes(self) -> tuple[int | None, str]:
        """Memory other processes held, and how it is known."""
        if self.processes:
            return sum(b for _, b in self.processes), "listed in the message"
        if self.device_total is not None and self.device_free is not None:
            used = self.this_process if self.this_process is not None else self.reserved + CONTEXT_ESTIMATE
            outside = self.device_total - self.device_free - used
            how = ("card total - free - this process" if self.this_process is not None
                   else f"card total - free - reserved - {format_bytes(CONTEXT_ESTIMATE)} for the CUDA context")
            if outside > DRIVER_SLACK:
                return outside, how
            # Below DRIVER_SLACK the difference is the driver's own memory, not another process. Where NVML
            # reported this process, it listed the others too: none. Where nothing was listed (torch 2.0 and
            # older never list processes) the estimate rests on a guess of the CUDA context: no figure is known.
            if self.this_process is not None:
                return 0, how
            return None, ("not known: the message lists no processes, and the card's total less its free memory and "
                          "this process's cache is within what the CUDA context and the driver take")
        return None, "unknown"


@dataclass(frozen=True)
class Verdict:
    cause: str
    summary: str                                   # one plain sentence
    numbers: dict[str, int | None]                 # the figures it rests on (bytes)
    reasons: list[str]                             # how the figures lead to the cause
    next_steps: list[str]
    sure: bool = True
    notes: list[str] = field(default_factory=list)
    suggested_conf: str | None = None              # the setting the steps suggest trying, untested

    def to_json(self) -> dict:
        return {"cause": self.cause, "summary": self.summary, "numbers": self.numbers, "reasons": self.reasons,
                "next_steps": self.next_steps, "sure": self.sure, "notes": self.notes}


def judge(f: OomFacts, *, replay_hint: str = "alloctune replay SNAPSHOT") -> Verdict:
    """The cause of the OOM described by `f` (see the module docstring for the rules)."""
    q, a, u, r, tol = f.requested, f.allocated, f.unallocated, f.reserved, _tolerance(f)
    others, how = f.others_bytes()
    numbers: dict[str, int | None] = {
        "requested": q, "allocated": a, "reserved": r, "reserved_unallocated": u, "device_free": f.device_free,
        "device_total": f.device_total, "allowed": f.allowed, "largest_free_block": f.largest_free_block,
        "other_processes": others}
    notes = _notes(f, others, how)
    cached = u > tol  # with no cache left there is nothing fragmented: a failure at the limit is the limit
    if f.allowed is not None and r + q > f.allowed - tol:  # the budget refused before CUDA was asked
        margin = f.allowed - (a + q)
        if margin >= 0 and cached:
            return _fragmentation(f, numbers, notes, margin, f"the budget ({format_bytes(f.allowed)})", replay_hint)
        card_room = r + f.device_free if f.device_free is not None else None
        if card_room is None or a + q <= card_room:
            return _budget(f, numbers, notes, card_room)
    free = f.free
    margin = u + free - q
    # Other processes that hold more than this job's live tensors and its request dominate the card: freeing
    # them is the plain fix even when the job's own cache might have squeezed the request in.
    dominant = others is not None and others > max(q, a) + tol + (0 if f.processes else CONTEXT_ESTIMATE)
    if margin >= 0 and cached and not dominant:
        return _fragmentation(f, numbers, notes, margin, "what this process could have of the card", replay_hint)
    shortfall = max(-margin, 0)
    numbers["shortfall"] = shortfall
    if others is not None and (dominant or others >= shortfall > 0):
        return _other_processes(f, numbers, notes, others, how, shortfall, dominant)
    return _shortage(f, numbers, notes, others, shortfall)


def _notes(f: OomFacts, others: int | None, how: str) -> list[str]:
    """What the verdict says beside its cause: a budget in force, and what other processes held."""
    fb, notes = format_bytes, []
    if f.allowed is not None and f.device_total:
        notes.append(f"a memory budget is in force: {fb(f.allowed)} allowed of the card's {fb(f.device_total)} "
                     f"({f.allowed / f.device_total:.3f} of it)")
    if others and others > _tolerance(f):
        notes.append(f"other processes held {fb(others)} of the card ({how})")
    elif others is None and how.startswith("not known"):
        notes.append(f"the memory other processes held is {how}")
    return notes


def _other_processes(f: OomFacts, numbers: dict, notes: list[str], others: int, how: str, shortfall: int,
                     dominant: bool) -> Verdict:
    fb, q, a, u = format_bytes, f.requested, f.allocated, f.unallocated
    free = f.free
    listed = ", ".join(f"{pid}: {fb(b)}" for pid, b in f.processes)
    reasons = [f"the request {fb(q)} against this process's unused cache {fb(u)} plus the {fb(free)} free on "
               f"the card" + (f": {fb(shortfall)} short" if shortfall else ""),
               f"other processes held {fb(others)} ({how}{': ' + listed if listed else ''}), more than "
               + ("the shortfall" if not dominant else f"this job's live tensors ({fb(a)})")]
    steps = ["free the GPU or use another: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` "
             "lists who holds it; CUDA_VISIBLE_DEVICES picks an idle GPU",
             f"the job itself needs {fb(a + q)} live here; no allocator setting makes up for memory that other "
             "processes hold"]
    return Verdict(OTHER_PROCESSES, f"Other processes hold {fb(others)} of this GPU; without them the request "
                   "would have fit.", numbers, reasons, steps,
                   sure=others - shortfall > _tolerance(f) + (0 if f.processes else CONTEXT_ESTIMATE),
                   notes=[n for n in notes if not n.startswith("other processes held")])  # a reason here


def _shortage(f: OomFacts, numbers: dict, notes: list[str], others: int | None, shortfall: int) -> Verdict:
    fb, q, a, u, r = format_bytes, f.requested, f.allocated, f.unallocated, f.reserved
    free = f.free
    context = f.this_process - r if f.this_process is not None else CONTEXT_ESTIMATE
    usable = f.device_total - (others or 0) - context if f.device_total else None
    reasons = [f"live tensors {fb(a)} + the request {fb(q)} = {fb(a + q)}"
               + (f", {'more than' if a + q > usable else 'within'} the {fb(usable)} this process can have of the "
                  f"{fb(f.device_total)} card" if usable else ""),
               f"unused cache {fb(u)} + free {fb(free)}"
               + (f" fall {fb(shortfall)} short of the request" if shortfall else
                  " would cover the request, but the cache is nearly empty: the allocation rounded up to a whole "
                  "segment did not fit, or the memory was taken meanwhile")]
    if f.device_total and q > f.device_total:
        reasons.append(f"the single request {fb(q)} is larger than the whole card")
    fewer = max(shortfall, q - free)
    steps = [f"hold less at once{f': at least {fb(fewer)} fewer bytes live' if fewer > 0 else ''} (smaller batches "
             "or sequences, activation checkpointing, lower precision, sharding or offloading)",
             "or a larger card: `alloctune replay TRACE --min-memory` gives the smallest that fits, per setting",
             "an allocator setting cannot help: the live tensors themselves do not fit"]
    return Verdict(SHORTAGE, f"A true shortage: the live tensors ({fb(a)}) plus the request ({fb(q)}) do not fit "
                   "in this GPU's memory.", numbers, reasons, steps, sure=shortfall > _tolerance(f), notes=notes)


def _budget(f: OomFacts, numbers: dict, notes: list[str], card_room: int | None) -> Verdict:
    fb = format_bytes
    assert f.allowed is not None
    needed = f.allocated + f.requested
    frac = f"{needed / f.device_total:.3f}" if f.device_total else None
    reasons = [f"live tensors {fb(f.allocated)} + the request {fb(f.requested)} = {fb(needed)}, "
               f"{'more than' if needed > f.allowed else 'at'} the {fb(f.allowed)} allowed"
               + ("" if f.unallocated > _tolerance(f) else ", with no cached memory left to blame"),
               (f"the card had {fb(f.device_free)} free beyond this process's {fb(f.reserved)}: it had room"
                if card_room is not None else "the message does not say how much of the card was free")]
    steps = [f"raise the budget above {fb(needed)}"
             + (f" (torch.cuda.set_per_process_memory_fraction({frac}) or, on torch >= 2.10, "
                f"PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:{frac}; more for headroom)" if frac else ""),
             "or make the job need less under this budget: `alloctune sweep WORKLOAD --budget "
             f"{_size_arg(f.allowed)}` measures the settings, then `alloctune export RESULTS`"]
    sure = needed - f.allowed > _tolerance(f) and (card_room is None or card_room - needed > _tolerance(f))
    return Verdict(BUDGET, f"The memory budget is the limit: the job needs {fb(needed)} now, {fb(f.allowed)} is "
                   "allowed, and the card had room.", numbers, reasons, steps, sure=sure, notes=notes)


def _fragmentation(f: OomFacts, numbers: dict, notes: list[str], margin: int, limit: str,
                   replay_hint: str) -> Verdict:
    fb = format_bytes
    q, a, u = f.requested, f.allocated, f.unallocated
    reasons = [f"live tensors {fb(a)} + the request {fb(q)} = {fb(a + q)} fit within {limit} "
               f"({fb(margin)} to spare)",
               f"{fb(u)} was reserved by PyTorch but unallocated: free pieces inside segments that also hold live "
               "tensors, so the allocator could neither use them for this request nor give them back"]
    if f.largest_free_block is not None:
        reasons.append(f"the largest free block was {fb(f.largest_free_block)}, smaller than the request")
    budget = f" --budget {_size_arg(f.allowed)}" if f.allowed is not None else ""
    suggested = EXPANDABLE if f.expandable_segments else SPLIT_LIMIT
    if f.expandable_segments:
        first = (f"try PYTORCH_CUDA_ALLOC_CONF={EXPANDABLE} (memory is mapped page by page, so free pages "
                 "between live tensors are given back and reused)")
        confs = "--conf expandable_segments:True --conf max_split_size_mb:512"
    else:   # expandable segments came with torch 2.1
        first = (f"try PYTORCH_CUDA_ALLOC_CONF={SPLIT_LIMIT} (cached blocks above 512 MiB are not split, so "
                 "large requests find them whole); this torch (2.0 or older) has no expandable_segments, which "
                 "torch 2.1 and later offer for this")
        confs = "--conf max_split_size_mb:512 --conf max_split_size_mb:128"
    steps = [first,
             f"check it offline on a snapshot (alloctune.dump_on_oom): `{replay_hint}{budget} {confs}`, or measure "
             f"the settings: `alloctune sweep WORKLOAD{budget}`, then `alloctune export RESULTS`"]
    enough = "enough for" if u >= q else f"with the {fb(f.device_free)} free on the card enough for"
    return Verdict(FRAGMENTATION, f"Cached, fragmented memory: {fb(u)} was reserved but unused, {enough} the "
                   f"{fb(q)} request, yet in pieces too small for it.", numbers, reasons, steps,
                   sure=margin > _tolerance(f) and u > _tolerance(f), notes=notes, suggested_conf=suggested)


def _tolerance(f: OomFacts) -> int:
    """How far a deciding margin can be off: it adds or subtracts up to three figures, each rounded."""
    return 3 * f.precision


def _size_arg(n: int | None) -> str:
    """A size as a CLI argument: whole MiB."""
    return f"{(n or 0) // MiB}MiB"
