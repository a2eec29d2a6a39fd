"""Which of five causes an out-of-memory error had, from the figures at the moment it happened (pure). Figures that
contradict each other (more free than the card, live tensors beyond the cache, a request of 0 bytes, a negative
size: `OomFacts.inconsistencies`) come from no allocator's state: diagnose refuses them before any verdict.

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
     but where it does only with the free memory of CUDA graphs' private pools (P, part of U: no request outside
     a capture into them can use it, and the allocator does not release it while a graph uses the pool), that is,
     Q > U - P + F: **graph pools**. Likewise under a budget when A + Q <= L < A + P + Q;
   - else, if memory held by other processes covers the shortfall (Q - U - F): **other processes**;
   - else **shortage**: the live tensors alone do not fit.
Fragmentation needs a cache: with U (about) 0, a failure at the limit is the limit (budget or shortage).

Figures read from a message are rounded (`precision` each; a margin sums up to three of them); a verdict whose
deciding margin is within that rounding says so (`sure` False). A verdict is data: the cause and the figures it
quotes (`facts.py`); its sentences are `words.py`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from . import words
from .facts import CONTEXT_ESTIMATE, Basis, Cause, Figures, Limit, OomFacts, Recommendation

if TYPE_CHECKING:
    from .message import OomMessage
    from .window import WindowReplay

EXPANDABLE = "expandable_segments:True"   # what fragmentation suggests trying
SPLIT_LIMIT = "max_split_size_mb:512"      # what it suggests to a torch older than 2.1, which has no EXPANDABLE


@dataclass(frozen=True)
class Verdict:
    cause: Cause
    figures: Figures
    sure: bool = True    # False: the deciding margin is within the rounding of the figures

    @property
    def numbers(self) -> dict[str, int | None]:
        """The figures it rests on (bytes)."""
        f = self.figures.facts
        numbers = {"requested": f.requested, "allocated": f.allocated, "reserved": f.reserved,
                   "reserved_unallocated": f.unallocated, "device_free": f.device_free,
                   "device_total": f.device_total, "allowed": f.allowed, "largest_free_block": f.largest_free_block,
                   "other_processes": self.figures.others, "non_pytorch": f.non_pytorch,
                   "graph_pools_free": f.graph_pools_free}
        return numbers | ({"shortfall": self.figures.shortfall} if self.figures.shortfall is not None else {})

    @property
    def suggested_conf(self) -> str | None:
        return self.figures.suggested_conf

    @property
    def summary(self) -> str:
        """One plain sentence."""
        return words.summary(self.cause, self.figures)

    @property
    def reasons(self) -> list[str]:
        """How the figures lead to the cause."""
        return words.reasons(self.cause, self.figures)

    @property
    def next_steps(self) -> list[str]:
        return words.steps(self.cause, self.figures)

    @property
    def notes(self) -> list[str]:
        """What the verdict says beside its cause."""
        return words.notes(self.cause, self.figures)

    def to_json(self) -> dict:
        # guessed_pid: the process NVML listed whose figure non_pytorch and other_processes take for this one's
        return {"cause": self.cause.value, "summary": self.summary, "numbers": self.numbers,
                "guessed_pid": self.figures.facts.guessed_pid, "reasons": self.reasons, "next_steps": self.next_steps,
                "sure": self.sure, "notes": self.notes}


def judge(f: OomFacts, *, replay_hint: str = "alloctune replay SNAPSHOT") -> Verdict:
    """The cause of the OOM described by `f`, whose figures are consistent (see the module docstring for the
    rules)."""
    assert not f.inconsistencies(), f.inconsistencies()
    q, a, u, r, tol = f.requested, f.allocated, f.unallocated, f.reserved, f.tolerance
    others, known = f.others_bytes()
    cached = u > tol  # with no cache left there is nothing fragmented: a failure at the limit is the limit
    if f.allowed is not None and r + q > f.allowed - tol:  # the budget refused before CUDA was asked
        margin = f.allowed - (a + q)
        if margin >= 0 and cached:
            return _fragmentation(Figures(f, others, known, margin=margin, limit=Limit.BUDGET,
                                          replay_hint=replay_hint), margin - f.graph_pools_free)
        card_room = r + f.device_free if f.device_free is not None else None
        if card_room is None or a + q <= card_room:
            needed = a + q
            sure = needed - f.allowed > tol and (card_room is None or card_room - needed > tol)
            return Verdict(Cause.BUDGET, Figures(f, others, known, card_room=card_room), sure)
    margin = u + f.free - q
    # Other processes that hold more than this job's live tensors and its request dominate the card: freeing
    # them is the plain fix even when the job's own cache might have squeezed the request in.
    dominant = others is not None and others > max(q, a) + tol + (0 if f.processes else CONTEXT_ESTIMATE)
    if margin >= 0 and cached and not dominant:
        return _fragmentation(Figures(f, others, known, margin=margin, limit=Limit.CARD, replay_hint=replay_hint),
                              margin - f.graph_pools_free)
    shortfall = max(-margin, 0)
    if others is not None and (dominant or others >= shortfall > 0):
        return Verdict(Cause.OTHER_PROCESSES, Figures(f, others, known, shortfall, dominant=dominant),
                       sure=others - shortfall > tol + (0 if f.processes else CONTEXT_ESTIMATE))
    return Verdict(Cause.SHORTAGE, Figures(f, others, known, shortfall), sure=shortfall > tol)


def _fragmentation(figures: Figures, outside_pools: int) -> Verdict:
    """Fragmentation, or graph pools where the margin needs the pools' free memory (`outside_pools` < 0: what is
    left to spare without it)."""
    f = figures.facts
    if outside_pools < 0:
        return Verdict(Cause.GRAPH_POOLS, figures, sure=-outside_pools > f.tolerance and figures.margin > f.tolerance)
    suggested = EXPANDABLE if f.expandable_segments else SPLIT_LIMIT
    return Verdict(Cause.FRAGMENTATION, replace(figures, suggested_conf=suggested),
                   sure=figures.margin > f.tolerance and f.unallocated > f.tolerance)


def recommend(verdict: Verdict, replay: WindowReplay | None) -> Recommendation | None:
    """The setting to recommend: where a replay of the failed run can be trusted (its confidence is not low), the
    lowest-peak setting that fitted in it, or none where none did; else the one the verdict suggests trying."""
    if replay is not None and replay.confidence != "low":
        if not replay.fitting:
            return None
        best = replay.fitting[0]
        return Recommendation(str(best.setting), Basis.REPLAY, best.result.peak_reserved_bytes if best.result else None)
    return Recommendation(verdict.suggested_conf, Basis.VERDICT) if verdict.suggested_conf else None


# Which OOM of several (a log of several ranks) a diagnosis details: the cause no setting can fix first, then the one
# that needs the most memory.
WORST_FIRST = (Cause.SHORTAGE, Cause.OTHER_PROCESSES, Cause.BUDGET, Cause.GRAPH_POOLS, Cause.FRAGMENTATION)


@dataclass(frozen=True)
class Oom:
    """One OOM a source holds, judged: its message (None: a snapshot's alone), figures and verdict."""

    message: OomMessage | None
    facts: OomFacts
    verdict: Verdict
    warnings: tuple[str, ...] = ()

    @property
    def rank(self) -> int | None:
        return self.message.rank if self.message else None

    def to_json(self) -> dict:
        return {"rank": self.rank, "gpu": self.facts.gpu, "requested_bytes": self.facts.requested,
                "cause": self.verdict.cause.value, "sure": self.verdict.sure, "verdict": self.verdict.to_json()}


def worst(ooms: list[Oom]) -> Oom:
    """The OOM a diagnosis of several details (`WORST_FIRST`; the first of equals)."""
    return min(ooms, key=lambda o: (WORST_FIRST.index(o.verdict.cause), -(o.facts.allocated + o.facts.requested)))
