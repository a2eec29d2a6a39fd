"""`alloctune diagnose`: from a CUDA out-of-memory error to its cause and the next step.

    diagnose(*sources, device=None, confs=None, jobs=None, all_problems=False) -> Diagnosis

Each source is a path (or '-' for stdin), read by `sources.py`, to one of:
- an OOM message: the exception's text, a traceback, or a whole log (`message.py` reads every format);
- a memory snapshot pickle (`alloctune.dump_on_oom`, `torch.cuda.memory._dump_snapshot`), read with the
  project's safe loader, its figures by `snapshot.py`; the message beside it (`oom-rank0.txt` next to it) too;
- a results folder: its latest trial that ended in an OOM (the child records the exception's text).

Figures come from the snapshot where it has them (exact), else from the message (rounded); other processes and the
card's total come from the message or from what `dump_on_oom` stored (`facts.py`: `OomFacts`). A log may hold several
OOMs (the ranks of one job): each is judged, the worst detailed (`verdict.worst`; with a snapshot, its own). Figures
no allocator's state has (more free than the card, a negative size: `OomFacts.inconsistencies`) are refused in one
line, naming the source and what is impossible; `verdict.judge` (`verdict.py`, pure) names the cause of the others, as
data (a `Cause` and the figures it quotes); `words.py` says it. With a trace in the snapshot, `window.replay_window`
(`window.py`) replays the run under the recorded setting (to check the reconstruction) and under the candidate
settings. `verdict.recommend` makes the one recommendation (the lowest-peak setting that fitted in a trusted replay,
else the one the verdict suggests), which the next steps, `recommended_conf` and `--json` all give; its known problems
that matter for this job (`problems.py`: by its torch and what it was seen doing) come right after it.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

from ..errors import DiagnoseError, TraceError
from ..files import checked_path
from ..settings.keys import default_mb
from ..settings.known import Feature, Problem
from ..sim.blocks import SMALL_SIZE, get_allocation_size
from ..sim.rebuilt import overhead_at_oom, reconstruct
from ..sim.trace import snapshot_trace
from ..units import MiB, format_bytes
from .message import OomMessage
from .snapshot import SnapshotView, check_snapshot, picture_lines, view_snapshot
from .facts import OomFacts, Recommendation
from .problems import KnownProblems, job_of, known_problems
from .sources import read_sources
from .verdict import Oom, Verdict, judge, recommend, worst
from . import words
from .words import NONE_FITTED, known_problems_line, recommendation_step
from .window import WindowReplay, replay_window

__all__ = ["Diagnosis", "diagnose"]


@dataclass
class Diagnosis:
    sources: list[str]
    verdict: Verdict | None
    facts: OomFacts | None
    message: OomMessage | None = None
    snapshot: SnapshotView | None = None
    replay: WindowReplay | None = None
    # the one setting recommended (`verdict.recommend`): by replay where one can be trusted, else the verdict's
    recommendation: Recommendation | None = None
    warnings: list[str] = field(default_factory=list)
    problems: KnownProblems | None = None      # the recommended setting's known problems that matter for the job
    ooms: list[Oom] = field(default_factory=list)   # every OOM the sources hold (a log of several ranks), judged

    @property
    def recommended_conf(self) -> str | None:
        """The PYTORCH_CUDA_ALLOC_CONF value recommended: the one the next steps name first (None: none)."""
        return self.recommendation.conf if self.recommendation else None

    @property
    def recommended_peak_reserved(self) -> int | None:
        """The peak reserved the replay reached under it (None: not replayed)."""
        return self.recommendation.peak_reserved if self.recommendation else None

    @property
    def next_steps(self) -> list[str]:
        """The verdict's steps, led by the recommendation (or by a trusted replay where nothing fitted)."""
        if self.verdict is None:
            return []
        steps = words.steps(self.verdict.cause, self.verdict.figures, suggestion=False)
        if self.recommendation is not None:
            steps.insert(0, recommendation_step(self.recommendation, self.verdict.figures))
        elif self.replay is not None and not self.replay.fitting:
            steps.insert(0, NONE_FITTED)
        if (k := self.problems) is not None:   # right after the step that names it
            steps.insert(1, known_problems_line(k.conf, k.job.torch_version, k.job.versions, k.shown, len(k.hidden),
                                                k.job.seen))
        return steps

    @property
    def checked_conf(self) -> str | None:
        """The setting looked up in the table of known problems: the one recommended."""
        return self.problems.conf if self.problems else None

    @property
    def torch_version(self) -> str | None:
        """The torch it was looked up for (None: not known; the message's layout may narrow it)."""
        return self.problems.job.torch_version if self.problems else None

    @property
    def known_problems(self) -> list[Problem]:
        """Those of its known problems shown, the ones that matter most for the job first."""
        return list(self.problems.shown) if self.problems else []

    def picture(self) -> list[str]:
        return picture_lines(self.snapshot) if self.snapshot else []

    def to_json(self) -> dict:
        return {"sources": self.sources, "verdict": self.verdict.to_json() if self.verdict else None,
                "cause": self.verdict.cause if self.verdict else None,
                "message": self.message.to_json() if self.message else None,
                "snapshot": self.snapshot.to_json() if self.snapshot else None,
                "replay": self.replay.to_json() if self.replay else None,
                "recommended_conf": self.recommended_conf,
                "recommended_peak_reserved_bytes": self.recommended_peak_reserved,
                "recommendation": None if self.recommendation is None else {
                    "conf": self.recommendation.conf, "basis": self.recommendation.basis.value,
                    "peak_reserved_bytes": self.recommendation.peak_reserved},
                "next_steps": self.next_steps, "ooms": [o.to_json() for o in self.ooms],
                "warnings": self.warnings,
                "known_problems": None if self.problems is None else {
                    "conf": self.checked_conf, "torch_version": self.torch_version,
                    "features_seen": [f.value for f in Feature if f in self.problems.job.seen],
                    "features_whole": self.problems.job.whole, "hidden": [p.id for p in self.problems.hidden],
                    "problems": [{"id": p.id, "severity": p.severity.value, "when": [f.value for f in Feature
                                                                                     if f in p.when],
                                  "versions": str(p.versions), "source": p.source} for p in self.known_problems]}}


def diagnose(*sources: str | os.PathLike, device: int | None = None, confs: list[str] | None = None,
             jobs: int | None = None, all_problems: bool = False) -> Diagnosis:
    """Diagnose the OOM the sources describe (see the module docstring)."""
    if not sources:
        raise DiagnoseError("diagnose needs a message, a snapshot or a results folder")
    names = [checked_path(source, "diagnose") for source in sources]
    if names.count("-") > 1:
        raise DiagnoseError("'-' (stdin) can be given once")
    given = len(names)
    # `names` gains a message read beside the snapshot; `read` notes OOMs without figures beside those diagnosed
    messages, snapshot, where, features, read = read_sources(names)
    if snapshot is not None:
        check_snapshot(snapshot, where)
    view = view_snapshot(snapshot, where, device) if snapshot is not None else None
    messages, stale = _of_one_oom(messages, view, names, beside=len(names) > given)
    hint = f"alloctune replay {shlex.quote(where) if where else 'SNAPSHOT'}"
    ooms, main = _judged(messages, view, hint, ", ".join(names))
    message = main.message if main else (messages[-1] if messages else None)
    warnings = read + stale + (list(main.warnings) if main else list(message.notes) if message else [])
    if main is None:
        warnings.append("the snapshot records no OOM (no 'oom' trace entry, and no alloctune.dump_on_oom "
                        "figures): showing its fragmentation picture only")
    facts, verdict = (main.facts, main.verdict) if main else (None, None)
    result = Diagnosis(names, verdict, facts, message, view, warnings=warnings, ooms=ooms)
    if view is not None and snapshot is not None and view.has_trace and facts is not None and view.oom:
        _replay(result, snapshot, where, view, facts, confs, jobs)
    result.recommendation = recommend(verdict, result.replay) if verdict is not None else None
    if result.recommended_conf is not None:
        job = job_of(view.extra.get("torch_version") if view is not None else None, message, facts, features)
        result.problems = known_problems(result.recommended_conf, job, all_problems)
    return result


def _judged(messages: list[OomMessage], view: SnapshotView | None, hint: str,
            sources: str) -> tuple[list[Oom], Oom | None]:
    """Every OOM judged, each message's, the snapshot's figures completing the one of its OOM (the snapshot's alone
    without a message); and the one the diagnosis details: the snapshot's, else the worst (`verdict.worst`).
    Figures no allocator's state has are refused (`OomFacts.inconsistencies`), naming `sources`."""
    ours = _of_snapshot(messages, view)
    ooms, detailed = [], None
    candidates: list[OomMessage | None] = [*messages] or [None]
    for message in candidates:
        warnings: list[str] = list(message.notes) if message else []
        facts = _facts(message, view if message is ours else None, warnings)
        if facts is not None and (found := facts.inconsistencies()):
            raise DiagnoseError(words.impossible(found, sources, message.rank if message else None))
        if facts is not None:
            ooms.append(Oom(message, facts, judge(facts, replay_hint=hint), tuple(warnings)))
            detailed = ooms[-1] if view is not None and message is ours else detailed
    return ooms, detailed or (worst(ooms) if ooms else None)


def _of_one_oom(messages: list[OomMessage], view: SnapshotView | None, names: list[str],
                beside: bool) -> tuple[list[OomMessage], list[str]]:
    """The messages to judge with the snapshot, and a warning: messages none of which is the snapshot's OOM are
    refused (figures of two OOMs make none), unless read `beside` it: dump_on_oom writes the message of an OOM
    nobody caught only, so one a later OOM's snapshot overwrote is left there; it is dropped (and from `names`)."""
    if view is None or view.oom is None or not messages or _of_snapshot(messages, view) is not None:
        return messages, []
    requested = view.oom["requested"]
    if not beside:
        raise DiagnoseError(words.other_oom(", ".join(names), requested, [m.requested for m in messages]))
    return [], [words.stale_message(names.pop(), requested, messages[-1].requested)]


def _of_snapshot(messages: list[OomMessage], view: SnapshotView | None) -> OomMessage | None:
    """The message of the snapshot's OOM: the last that reports its request (`_reports`), None where none does (the
    last message where there is no snapshot, or it records no OOM)."""
    if view is None or view.oom is None:
        return messages[-1] if messages else None
    large = (view.recorded_conf().large_segment_size_mb or default_mb("large_segment_size_mb")) * MiB
    same = [m for m in messages if _reports(m, view.oom["requested"], large)]
    return same[-1] if same else None


def _reports(message: OomMessage, requested: int, large_segment: int) -> bool:
    """Whether `message` reports the request of `requested` bytes a snapshot's trace holds, within its rounding:
    torch prints the segment it would have asked CUDA for (`get_allocation_size`: 2 MiB for a small request, the
    large segment below 10 MiB, else the request rounded up to 2 MiB), the trace the request itself."""
    segment = get_allocation_size(requested, requested <= SMALL_SIZE, large_segment)
    return any(abs(message.requested - size) <= message.precision for size in (requested, segment))


def _facts(message: OomMessage | None, view: SnapshotView | None, warnings: list[str]) -> OomFacts | None:
    """The snapshot's exact figures, completed by the message's; or the message's alone."""
    exact = view.facts() if view else None
    if message is None:
        return exact
    reserved = exact.reserved if exact else message.reserved
    this_process, others, guessed = _this_process(message, reserved, warnings)
    if exact is None:
        if message.allocated is None or message.reserved is None:
            raise DiagnoseError("the message does not say how much PyTorch had allocated and reserved: "
                                "cannot tell the causes apart")
        pool = view.pool_of(message.requested, 0) if view else None  # a snapshot taken without a trace
        return OomFacts(message.requested, message.allocated, message.reserved, message.device_free,
                        message.device_total, message.allowed, this_process, others,
                        pool.largest_free if pool else None, message.precision, message.gpu,
                        not message.predates_expandable_segments, message.private_pools or 0, guessed)
    return OomFacts(exact.requested, exact.allocated, exact.reserved,
                    exact.device_free if exact.device_free is not None else message.device_free,
                    exact.device_total or message.device_total,
                    exact.allowed if exact.allowed is not None else message.allowed,
                    this_process, others, exact.largest_free_block, 0, exact.gpu,
                    exact.expandable_segments and not message.predates_expandable_segments, exact.graph_pools_free,
                    guessed)


def _this_process(message: OomMessage, reserved: int | None,
                  warnings: list[str]) -> tuple[int | None, tuple[tuple[int, int], ...], int | None]:
    """This process's memory, the others', and the pid of the process taken to be this one (None: the message
    names it, or none is). NVML names this process "this process" only when it can match its pid (not inside many
    containers); then this process is listed like the others, as "Process N has": the smallest one holding at least
    what PyTorch had reserved is taken to be it."""
    if message.this_process is not None or not message.processes or reserved is None:
        return message.this_process, message.processes, None
    big_enough = [p for p in message.processes if p[1] >= reserved - message.precision]
    if not big_enough:
        return None, message.processes, None
    pid, used = min(big_enough, key=lambda p: p[1])
    warnings.append(f"the message does not say which process is this one; process {pid} ({format_bytes(used)}) is "
                    f"taken to be it: the smallest that holds at least the {format_bytes(reserved)} PyTorch "
                    "had reserved")
    return used, tuple(p for p in message.processes if p[0] != pid), pid


def _replay(result: Diagnosis, snapshot: dict, where: str, view: SnapshotView, facts: OomFacts,
            confs: list[str] | None, jobs: int | None) -> None:
    from ..settings.grid import DEFAULT_GRID, apply_rules, expand, refuse_rejected
    from ..sim.target import Target

    assert view.oom is not None
    recon = reconstruct(snapshot, view.device, view.oom["requested"], view.oom.get("stream", 0))
    try:   # the requests every command that replays this snapshot runs (`load_trace` reads it so)
        trace = snapshot_trace(snapshot, where, view.device, recon)
    except TraceError as exc:   # what `replay` refuses is not replayed here either: the figures still speak
        result.warnings.append(f"the snapshot's trace was not replayed, as `alloctune replay` would not: {exc}")
        return
    recorded = view.recorded_conf()
    version = view.extra.get("torch_version")
    candidates = expand(confs or DEFAULT_GRID)
    candidates, skipped = apply_rules(candidates, version, has_budget=facts.allowed is not None)
    if confs:   # settings the user named: a typo stops here instead of being dropped, as in `replay`
        refuse_rejected(skipped, version)
    free = facts.device_free if facts.device_free is not None else 0
    device_memory = facts.device_total or facts.reserved + free   # what the device held outside: as `replay` has it
    overhead = trace.meta.get("overhead_bytes", overhead_at_oom(device_memory, facts.reserved, free) or 0)
    result.replay = replay_window(recon, trace, recorded, candidates, device_memory, overhead, facts.allowed, version,
                                  jobs)
    result.warnings += Target(version).warnings()   # as `replay` says it (sim/target.py): the torch it followed
    if not result.replay.reconstruction.whole_run:
        result.warnings.append(f"the trace starts mid-run (ring buffer of {view.extra.get('max_entries', 'N')} "
                               "entries): the state at its start was rebuilt from the segments")
