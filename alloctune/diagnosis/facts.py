"""What a diagnosis rests on, as data: the figures at the OOM (`OomFacts`, from a message or a snapshot), the checks
they must pass to be torch's own (`Check`, `Inconsistent`: figures that fail one are refused, never judged), how the
memory other processes held is known (`Known`),
the cause (`Cause`) and the figures a verdict quotes (`Figures`). `verdict.py` decides from them; `words.py` says
them."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..units import MiB

# What the CUDA context and libraries hold per process, when nothing measured it: 755-783 MiB on the H200
# (torch 2.11), the rest of the 1.36 GiB between nvidia-smi's and torch's totals being the driver's own.
CONTEXT_ESTIMATE = 1024 * MiB
# nvidia-smi's total exceeds torch's by the driver's reservation (615 MiB on the H200): an estimate of other
# processes' memory below this is that, not a process
DRIVER_SLACK = 512 * MiB


class Cause(str, enum.Enum):
    SHORTAGE = "shortage"
    FRAGMENTATION = "fragmentation"
    OTHER_PROCESSES = "other-processes"
    BUDGET = "budget"
    GRAPH_POOLS = "graph-pools"   # free memory held in CUDA graphs' private pools is what the request lacked

    def __str__(self) -> str:   # messages and --json show the value
        return self.value


class Check(str, enum.Enum):
    """What the figures of one OOM must satisfy, as any allocator's state does: the name of the one that failed, as
    '<figure> over <limit>' (the figure is larger than the limit, beyond the rounding)."""

    NEGATIVE = "negative figure"                # no size is below 0
    NOTHING_REQUESTED = "request of 0 bytes"    # an empty tensor takes no memory: it never fails
    NO_CARD = "card of 0 bytes"
    FREE_OVER_TOTAL = "free over total"
    RESERVED_OVER_TOTAL = "reserved over total"
    HELD_OVER_TOTAL = "reserved and free over total"   # this process's cache and the free memory are apart
    ALLOCATED_OVER_RESERVED = "allocated over reserved"   # live tensors lie inside the cache
    ALLOWED_OVER_TOTAL = "allowed over total"   # a memory fraction is at most the card
    PROCESSES_OVER_TOTAL = "processes over total"   # what NVML lists per process, this one included
    POOLS_OVER_UNALLOCATED = "graph pools over unallocated"   # the pools' free memory is part of the unused cache

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Inconsistent:
    """A check the figures fail: `figure` (bytes) is more than `limit` allows."""

    check: Check
    figure: int
    limit: int


class Known(enum.Enum):
    """How the memory other processes held is known."""

    LISTED = "listed"          # the message lists them
    NVML = "nvml"              # card total - free - this process (NVML's figure for it)
    ESTIMATED = "estimated"    # card total - free - reserved - CONTEXT_ESTIMATE
    WITHIN_SLACK = "within slack"   # no process listed, and the estimate is within the context and driver's share
    UNKNOWN = "unknown"        # the source gives neither processes nor the card's figures


class Limit(enum.Enum):
    """What a fragmentation verdict's tensors and request fit within."""

    BUDGET = "budget"
    GRAPH_POOLS = "graph-pools"   # free memory held in CUDA graphs' private pools is what the request lacked
    CARD = "card"   # what this process could have of the card


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
    # free cached bytes in CUDA graphs' private pools (the message's "allocated in private pools (e.g., CUDA
    # Graphs)", a snapshot's segments with a segment_pool_id): part of `unallocated`, which only captures into those
    # pools can use and which is not released while a graph uses the pool
    graph_pools_free: int = 0
    # where the message does not say which process is this one: the process whose figure `this_process` is, taken
    # to be this one (the smallest NVML listed that holds at least what PyTorch reserved)
    guessed_pid: int | None = None

    @property
    def unallocated(self) -> int:
        return self.reserved - self.allocated

    @property
    def non_pytorch(self) -> int | None:
        """What this process held beyond PyTorch's cache (NVML's figure for it, the message's "Including non-PyTorch
        memory", or for the process taken to be it, `guessed_pid`; less what PyTorch reserved): the CUDA context,
        and what libraries in the process allocate themselves; None where the source does not say."""
        return max(self.this_process - self.reserved, 0) if self.this_process is not None else None

    @property
    def beyond_context(self) -> int | None:
        """What this process held beyond PyTorch's cache and a CUDA context (`CONTEXT_ESTIMATE`), where more than the
        rounding: what libraries in the process allocated themselves, which no allocator setting gives back; None
        where it is not more, or not known."""
        beyond = self.non_pytorch - CONTEXT_ESTIMATE if self.non_pytorch is not None else None
        return beyond if beyond is not None and beyond > self.tolerance else None

    @property
    def free(self) -> int:
        """Free on the card, none where the source does not say: what the request could still have had."""
        return self.device_free if self.device_free is not None else 0

    @property
    def tolerance(self) -> int:
        """How far a deciding margin can be off: it adds or subtracts up to three figures, each rounded."""
        return 3 * self.precision

    def inconsistencies(self) -> tuple[Inconsistent, ...]:
        """The checks these figures fail, beyond their rounding: none for any state an allocator can be in, so a
        failure means the figures are not one OOM's (edited, mixed from two messages, misread)."""
        total, tol = self.device_total, self.tolerance
        figures = (self.requested, self.allocated, self.reserved, self.device_free, self.device_total, self.allowed,
                   self.this_process, self.graph_pools_free, *(b for _, b in self.processes))
        failed = [Inconsistent(Check.NEGATIVE, figure, 0) for figure in figures if figure is not None and figure < 0]
        if failed:   # the checks below compare sizes, which these are not
            return tuple(failed)
        failed += [Inconsistent(Check.NOTHING_REQUESTED, 0, 0)] if self.requested == 0 else []
        failed += [Inconsistent(Check.ALLOCATED_OVER_RESERVED, self.allocated, self.reserved)
                   ] if self.allocated > self.reserved + tol else []
        failed += [Inconsistent(Check.POOLS_OVER_UNALLOCATED, self.graph_pools_free, self.unallocated)
                   ] if self.graph_pools_free > self.unallocated + tol else []
        if total is None:
            return tuple(failed)
        if total <= 0:
            return tuple(failed + [Inconsistent(Check.NO_CARD, 0, 0)])
        held = sum(b for _, b in self.processes) + (self.this_process or 0)
        for check, figure in ((Check.FREE_OVER_TOTAL, self.device_free), (Check.RESERVED_OVER_TOTAL, self.reserved),
                              (Check.HELD_OVER_TOTAL, self.reserved + self.free if self.device_free is not None
                               else None),
                              (Check.ALLOWED_OVER_TOTAL, self.allowed), (Check.PROCESSES_OVER_TOTAL, held)):
            if figure is not None and figure > total + tol:
                failed.append(Inconsistent(check, figure, total))
        return tuple(failed)

    def others_bytes(self) -> tuple[int | None, Known]:
        """Memory other processes held, and how it is known."""
        if self.processes:
            return sum(b for _, b in self.processes), Known.LISTED
        if self.device_total is not None and self.device_free is not None:
            used = self.this_process if self.this_process is not None else self.reserved + CONTEXT_ESTIMATE
            outside = self.device_total - self.device_free - used
            how = Known.NVML if self.this_process is not None else Known.ESTIMATED
            if outside > DRIVER_SLACK:
                return outside, how
            # Below DRIVER_SLACK the difference is the driver's own memory, not another process. Where NVML
            # reported this process, it listed the others too: none. Where nothing was listed (torch 2.0 and
            # older never list processes) the estimate rests on a guess of the CUDA context: no figure is known.
            if self.this_process is not None:
                return 0, how
            return None, Known.WITHIN_SLACK
        return None, Known.UNKNOWN


@dataclass(frozen=True)
class Figures:
    """What a verdict quotes beyond the facts: what other processes held and how it is known, and the cause's own
    margins."""

    facts: OomFacts
    others: int | None
    known: Known
    shortfall: int | None = None     # device-bound: what the request lacked beyond unused cache and free memory
    margin: int = 0                  # fragmentation: what the tensors and the request leave within `limit`
    limit: Limit | None = None
    dominant: bool = False           # other processes: they hold more than this job's live tensors and request
    card_room: int | None = None     # budget: this process's reserved plus the card's free memory
    suggested_conf: str | None = None   # fragmentation: the setting the steps suggest trying, untested
    replay_hint: str = "alloctune replay SNAPSHOT"   # the command that replays the snapshot


class Basis(str, enum.Enum):
    """What a recommended setting rests on."""

    REPLAY = "replay"     # the failed run, replayed under it, would have fitted (the lowest peak that did)
    VERDICT = "verdict"   # the verdict's cause suggests it; untested here

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Recommendation:
    """The one setting a diagnosis recommends: what its text says and its data (`--json`, the API) hold."""

    conf: str
    basis: Basis
    peak_reserved: int | None = None   # REPLAY: the peak reserved the replay reached under it
