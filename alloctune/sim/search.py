"""Search the valid allocator settings space of a target torch by replaying one trace, and keep the Pareto front
of peak reserved memory against release-and-retry rounds and the number of keys set.

The space (`space.py`): every key the target torch has, at the values worth trying, and the divisions per size
interval. The grid's rules hold here too (`grid.apply_rules`), and with them the table of known problems
(`settings/known.py`): a combination known broken, wasteful or ineffective on the target torch whatever the job
does (max_split_size_mb or GC with expandable segments) is never replayed, let alone proposed. The whole space is
far too large to replay, so:

1. **Scan**: the default grid and every key alone at each of its values.
2. **Refine**: best first: the best setting not yet expanded has its neighbours replayed: one key changed, added
   or removed, and, for the divisions, one size interval's divisions changed. Until the budget of replays is
   spent or the best `BEAM` settings have all been expanded.

Every candidate is parsed by the target interpreter's own torch (the `validate` the caller passes, called once per
batch; `trial.probe.SettingsJudge` asks one child of that interpreter for the whole search) before it is replayed:
a setting that torch rejects is never replayed, let alone proposed. Candidates that round every request size of
this trace the same way as one already replayed (and agree on every other key) behave identically on it and are
not replayed again: they are listed as equivalent to the first.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from ..results.order import simpler
from ..results.vocabulary import SIMULATED_TORCH, signed_percent
from ..settings.conf import AllocConf
from ..settings.grid import apply_rules
from ..settings.validation import Validator
from ..units import format_bytes, plural
from .limits import DEFAULT_MAX_SETTINGS
from .replay import ReplayOutcome, replay
from .target import simulated_torch
from .space import Space
from .trace import Trace

BEAM = 8            # the search ends once the best BEAM settings have all been expanded
CLOSE_RATIO = 1.05  # reserved / allocated at or below this is as good as the allocator gets


@dataclass(frozen=True)
class Candidate:
    """One replayed setting. `equivalent`: settings not replayed because they behave identically on this trace."""

    outcome: ReplayOutcome
    round: int                               # 0 = scan, then the refinement round that proposed it
    equivalent: tuple[str, ...] = ()

    @property
    def setting(self) -> AllocConf:
        return self.outcome.setting

    @property
    def keys(self) -> int:
        return self.setting.complexity

    @property
    def conf(self) -> str:
        """The setting as tables and JSON show it ('default' for the default)."""
        return self.outcome.conf

    @property
    def canonical(self) -> str:
        """The canonical setting ('' for the default): what the search's bookkeeping files it under."""
        return str(self.setting)

    @property
    def fits(self) -> bool:
        return self.outcome.fits

    @property
    def peak_reserved(self) -> int:
        assert self.outcome.result is not None
        return self.outcome.result.peak_reserved_bytes

    @property
    def retries(self) -> int:
        assert self.outcome.result is not None
        return self.outcome.result.num_alloc_retries

    @property
    def ratio(self) -> float | None:
        r = self.outcome.result
        return r.peak_reserved_bytes / r.peak_allocated_bytes if r and r.peak_allocated_bytes else None

    def rank(self) -> tuple:
        """What the search improves: fits, then peak reserved, then retries, then the simpler setting
        (`results/order.simpler`).

        Not the choice's preference (decide/order.py), on purpose: the beam needs a total order, and the tie margin
        is not transitive; retries are a criterion of their own here, where the choice refuses more retries than
        the default's outright; and sim/ sits beside decide/, not above it. What the search finds is judged by the
        preference anyway: a sweep of its front is chosen from, and a hybrid sweep's finalists picked, by it."""
        r = self.outcome.result
        if r is None:
            return (2, 0, 0, *simpler(self.outcome.setting))
        return (int(r.num_ooms > 0), r.peak_reserved_bytes, r.num_alloc_retries, *simpler(self.outcome.setting))

    def to_json(self) -> dict:
        out = self.outcome.to_json()
        out.update(keys=self.keys, round=self.round, equivalent=list(self.equivalent), reserved_ratio=self.ratio)
        return out


@dataclass(frozen=True)
class FrontMember:
    candidate: Candidate
    reason: str

    def to_json(self) -> dict:
        return dict(self.candidate.to_json(), reason=self.reason)


@dataclass
class SearchResult:
    trace: str
    torch_version: str
    validated_by: str                        # probe method: 'torch', 'torch+static' or 'static'
    device_memory: int
    budget_bytes: int | None
    candidates: list[Candidate]              # every replayed setting, in the order replayed
    front: list[FrontMember]
    rejected: dict[str, str] = field(default_factory=dict)   # setting -> why its torch or the rules refuse it
    equivalent: int = 0                      # settings not replayed: identical behaviour to one that was
    rounds: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def default(self) -> Candidate | None:
        return next((c for c in self.candidates if c.setting.is_default), None)

    def best(self, n: int) -> list[Candidate]:
        """The `n` lowest-peak fitting settings of the front (the default excluded), best first."""
        return [m.candidate for m in self.front if not m.candidate.setting.is_default][:n]

    def to_json(self) -> dict:
        return {
            "trace": self.trace, "torch_version": self.torch_version, SIMULATED_TORCH: simulated_torch(self.torch_version),
            "validated_by": self.validated_by,
            "device_memory_bytes": self.device_memory, "budget_bytes": self.budget_bytes,
            "replayed": len(self.candidates), "equivalent_not_replayed": self.equivalent,
            "rejected": [{"conf": c, "reason": r} for c, r in self.rejected.items()],
            "rounds": self.rounds, "seconds": round(self.seconds, 3), "notes": self.notes,
            "front": [m.to_json() for m in self.front],
            "candidates": [c.to_json() for c in self.candidates],
        }


# Called after every replayed batch: (replayed so far, the budget, the best candidate so far).
ProgressFn = Callable[[int, int, "Candidate | None"], None]


def search(trace: Trace, *, validate: Validator, trace_name: str = "", device_memory: int,
           budget_bytes: int | None = None, overhead_bytes: int | None = None,
           max_settings: int = DEFAULT_MAX_SETTINGS, jobs: int | None = None,
           progress: ProgressFn | None = None) -> SearchResult:
    """Search the settings space of the target torch (the one `validate` asks) on `trace`; see the module
    docstring."""
    started = time.monotonic()
    # The target is the validating interpreter's torch, not the one that recorded the trace.
    space = Space.for_trace(trace, validate([]).torch_version, budget_bytes is not None)
    state = _State(space, validate, max(1, max_settings))

    def run_batch(confs: list[AllocConf], round_no: int) -> None:
        todo = state.admit(confs)
        if not todo:
            return
        confs_to_replay: list[AllocConf | str] = list(todo)
        outcomes = replay(trace, confs_to_replay, device_memory, budget_bytes=budget_bytes, overhead_bytes=overhead_bytes,
                          jobs=jobs, torch_version=space.torch_version)
        for conf, outcome in zip(todo, outcomes):
            state.add(Candidate(outcome, round_no))
        if progress:
            progress(len(state.replayed), state.max_settings, state.best())

    run_batch(space.scan(), 0)
    round_no = 0
    while state.room() > 0:
        seeds = state.next_seeds()
        if not seeds:
            break
        round_no += 1
        neighbours: list[AllocConf] = []
        for seed in seeds:
            state.expanded.add(seed.canonical)
            neighbours += space.neighbours(seed.outcome.setting)
        run_batch(neighbours, round_no)

    candidates = state.finished()
    notes = ["backend:cudaMallocAsync is not searched: the driver's pool cannot be simulated (measure it on the "
             "GPU)"]
    if state.room() <= 0 and state.next_seeds():
        notes.append(f"stopped at the budget of {state.max_settings} replays (--max-settings) before the search "
                     f"converged")
    return SearchResult(trace_name, space.torch_version, state.method, device_memory, budget_bytes, candidates,
                        pareto_front(candidates), state.rejected, state.equivalent_count, round_no,
                        time.monotonic() - started, notes)


def pareto_front(candidates: list[Candidate]) -> list[FrontMember]:
    """Fitting candidates that no other beats on peak reserved, retries and keys at once (lower is better in all
    three), by increasing peak reserved, each with the reason it is there. Candidates with the same three figures
    are one point: the first replayed (the simpler, by construction of the search) stands for them."""
    points: dict[tuple[int, int, int], Candidate] = {}
    for c in sorted((c for c in candidates if c.fits), key=Candidate.rank):
        points.setdefault((c.peak_reserved, c.retries, c.keys), c)
    front = [c for key, c in points.items()
             if not any(_dominates(other, key) for other in points if other != key)]
    front.sort(key=Candidate.rank)
    default = next((c for c in candidates if c.setting.is_default), None)
    return [FrontMember(c, _reason(c, front, default)) for c in front]


def _dominates(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return all(x <= y for x, y in zip(a, b)) and a != b


def _reason(c: Candidate, front: list[Candidate], default: Candidate | None) -> str:
    parts = []
    if c.setting.is_default:
        parts.append("the default: no key to set")
    elif c is front[0]:
        parts.append("lowest peak reserved of all settings replayed")
    else:
        parts.append(f"lowest peak reserved with at most {c.keys} key{'s' if c.keys > 1 else ''}"
                     + (f" and {c.retries} retries" if c.retries else ""))
    if c.retries == 0 and any(o.retries for o in front if o.peak_reserved < c.peak_reserved):
        parts.append("lowest peak without a release-and-retry")
    simpler = [o for o in front if o.keys < c.keys and o.peak_reserved > c.peak_reserved]
    if simpler:
        nearest = min(simpler, key=lambda o: o.peak_reserved)
        saved = nearest.peak_reserved - c.peak_reserved
        parts.append(f"{format_bytes(saved)} ({saved / nearest.peak_reserved:.2%}) below the best with "
                     f"{nearest.keys} key{'s' if nearest.keys != 1 else ''}")
    if default is not None and not c.setting.is_default and default.fits:
        parts.append(f"{signed_percent(c.peak_reserved / default.peak_reserved - 1)} vs the default")
    if c.ratio is not None and c.ratio <= CLOSE_RATIO:
        parts.append(f"reserved/allocated {c.ratio:.3f} (<= {CLOSE_RATIO})")
    if c.equivalent:
        parts.append(f"{plural(len(c.equivalent), 'other setting')} behave{'s' if len(c.equivalent) == 1 else ''} "
                     f"identically on this trace")
    return "; ".join(parts)


# ---- bookkeeping ----------------------------------------------------------------------------------------------


class _State:
    def __init__(self, space: Space, validate: Validator, max_settings: int):
        self.space, self.validate, self.max_settings = space, validate, max_settings
        self.seen: set[str] = set()
        self.replayed: dict[str, Candidate] = {}
        self.by_signature: dict[tuple, str] = {}
        self.equivalents: dict[str, list[str]] = {}
        self.rejected: dict[str, str] = {}
        self.expanded: set[str] = set()
        self.method = "static"
        self.equivalent_count = 0

    def room(self) -> int:
        return self.max_settings - len(self.replayed)

    def admit(self, confs: list[AllocConf]) -> list[AllocConf]:
        """The settings of `confs` to replay: new ones, valid for the target torch (its own parse, one `validate`
        call for the batch) and the grid's rules, not behaving like one already replayed, within the budget."""
        fresh: list[AllocConf] = []
        for conf in confs:
            if str(conf) not in self.seen:
                self.seen.add(str(conf))
                fresh.append(conf)
        fresh = [c for c in fresh if not c.is_async]
        if not fresh:
            return []
        check = self.validate(fresh)
        self.method = check.method
        valid, skipped = apply_rules(fresh, check.torch_version, has_budget=self.space.has_budget,
                                     accepted=check.verdicts)
        self.rejected.update((s.conf, s.reason) for s in skipped)
        todo: list[AllocConf] = []
        batch_signatures: dict[tuple, str] = {}
        for conf in valid:
            signature = self.space.signature(conf)
            first = self.by_signature.get(signature) or batch_signatures.get(signature)
            if first is not None:
                self.equivalents.setdefault(first, []).append(str(conf))
                self.equivalent_count += 1
            elif len(todo) < self.room():
                batch_signatures[signature] = str(conf)
                todo.append(conf)
        self.by_signature.update(batch_signatures)
        return todo

    def add(self, candidate: Candidate) -> None:
        self.replayed[candidate.canonical] = candidate

    def ranked(self) -> list[Candidate]:
        return sorted(self.replayed.values(), key=Candidate.rank)

    def best(self) -> Candidate | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def next_seeds(self, per_round: int = 2) -> list[Candidate]:
        """The best fitting settings not yet expanded, among the best BEAM."""
        top = [c for c in self.ranked() if c.outcome.simulated and c.fits][:BEAM]
        return [c for c in top if c.canonical not in self.expanded][:per_round]

    def finished(self) -> list[Candidate]:
        return [replace(c, equivalent=tuple(self.equivalents.get(c.canonical, ()))) for c in self.replayed.values()]

