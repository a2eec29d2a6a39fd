"""An in-process confirmation inside the user's job: its setting and the default in turn, in blocks of steps, in
ONE process (ALLOCTUNE_HOOK_ALTERNATE, set by trial/command.py for a task that alternates). Between two fresh
processes a step rate moves by several percent; inside one, the difference between two settings is timed to
about a percent (docs/measuring.md).

The process starts under its own setting (the candidate). From the end of the warm-up, the followed source's
steps (`counting.Counter`) run in blocks of `block_steps`: each block but the first begins by synchronising the
device, emptying the cache and setting its setting (the whole string, `settings/switching.py`: unnamed keys
reset), skips its first `skip_steps` steps (new segments, first shapes), and times the rest between two
synchronisations. The first block, the candidate's, runs on as the process started: an empty_cache there would
change the memory the process reports (below) from what a process under its setting makes (on the H100 a GPT's
peak reserved under expandable segments went from 18.63 to 20.58 GiB with one empty_cache after its warm-up, which
the replay reproduces to the byte: results/h100-in-process-2026-12-06b). Blocks
come in pairs, one of each setting, the order flipping from pair to pair (candidate first, then default, default,
candidate, ...), so that a machine drifting steadily favours neither. Every switch is read back; a torch that did
not take it ends the alternation (`SWITCH_FAILED`), and the run goes on under the candidate.

After each whole pair it asks whether the ratio is timed well enough (`resolved`: the half-width of a 95% interval
on the mean log ratio of the pairs at most `target`, from at least `min_pairs` pairs), or whether `max_pairs` or
`max_seconds` are spent; then it proposes a stop a few steps on (the `SharedStop` of the automatic window, so that
every rank of the job ends at the same step), switches back to the candidate and ends the process there
(`Counter`, as at a window's end). The process's memory figures are taken at the first switch: its own setting's
part, start-up to the end of its first block. The blocks go into the process's report (`ProcessReport.alternation`).
decide/inprocess.py judges them (the interval, the verdict); this rule only says when there are enough.

Standard library only, and light alloctune modules; torch only through the `Devices` the hook gives.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ..results.alternation import AlternatedBlock, Alternation, AlternationEnd
from .stopping import AHEAD_STEPS, SharedStop

TYPE_CHECKING = False   # typing is not imported inside the user's processes
if TYPE_CHECKING:
    from typing import Any, Callable, Protocol

    class Devices(Protocol):
        """What the alternation asks of the process's devices (the hook: `TorchDevices`; tests: a stand-in)."""

        def synced(self) -> float:
            """time.perf_counter() once the work queued on the process's devices has finished."""
            ...

        def switch(self, setting: str) -> str | None:
            """Synchronise, empty the cache, set `setting` (a whole string); why it did not take effect, or None."""
            ...

VARIABLE = "ALLOCTUNE_HOOK_ALTERNATE"
Z95 = 1.96   # the stop rule's normal quantile; decide/inprocess.py states the interval with Student's t


@dataclass(frozen=True)
class AlternatePlan:
    """What the parent asks (ALLOCTUNE_HOOK_ALTERNATE, JSON): the two settings' strings, the blocks, when to stop."""

    candidate: str          # the trial's own setting, whole (`switch_strings`)
    against: str            # the other one's, whole
    against_conf: str       # the other one's canonical string, for the record ('' = the default)
    block_steps: int
    skip_steps: int
    target: float           # half-width of the 95% interval on the ratio to reach (0.01: ±1%)
    min_pairs: int
    max_pairs: int
    max_seconds: float

    def to_env(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_env(cls, text: str) -> AlternatePlan:
        return cls(**json.loads(text))


def resolved(log_ratios: list[float], target: float, min_pairs: int) -> bool:
    """Whether these pairs time the ratio to `target`: at least `min_pairs`, and 1.96 standard errors of their
    mean log ratio within log(1 + target)."""
    n = len(log_ratios)
    if n < max(2, min_pairs):
        return False
    mean = sum(log_ratios) / n
    spread = math.sqrt(sum((r - mean) ** 2 for r in log_ratios) / (n - 1))
    return Z95 * spread / math.sqrt(n) <= math.log1p(target)


class Alternator:
    """One process's alternation (see the module). `step(count, steady)` after each step of the followed source
    (`count`: its steps so far, `steady`: since the end of the warm-up); True: end the process now."""

    def __init__(self, plan: AlternatePlan, devices: Devices, capture: Callable[[], Any],
                 stop: SharedStop | None = None):
        self.plan = plan
        self.devices = devices
        self.capture = capture        # the process's memory figures: taken at the first switch
        self.stop = stop
        self.captured: Any = None
        self.blocks: list[AlternatedBlock] = []
        self.end: AlternationEnd | None = None   # set once it stops alternating
        self.note: str | None = None
        self.agreed: int | None = None           # the step every process ends at
        self.candidate_now = True
        self.started: float | None = None
        self.timing: float | None = None         # the current block's timed part began then

    @property
    def active(self) -> bool:
        """It still alternates (the automatic window waits for it)."""
        return self.end is None

    def arm(self, block: int) -> bool:
        """Whether block `block` runs the candidate: C D | D C | C D | ..."""
        return (block % 2 == 0) == ((block // 2) % 2 == 0)

    def step(self, count: int, steady: int) -> bool:
        if self.agreed is None and self.stop is not None and (agreed := self.stop.read()) is not None:
            self.agreed, self.end = agreed, self.end or AlternationEnd.AGREED   # another process proposed it
        if self.agreed is not None:
            return count >= self.agreed and self._finish()
        if self.end is not None:   # a switch failed: the run goes on under the candidate
            return False
        block, at = divmod(steady, self.plan.block_steps)
        if at == 0:
            self._boundary(count, block)
        if self.end is None and at == self.plan.skip_steps:
            self.timing = self.devices.synced()
        return self.agreed is not None and count >= self.agreed and self._finish()

    def _boundary(self, count: int, block: int) -> None:
        """The end of block `block - 1` and the start of block `block`."""
        now = self.devices.synced()
        if self.started is None:
            self.started = now
        if block > 0 and self.timing is not None:
            self.blocks.append(AlternatedBlock(self.arm(block - 1), self.plan.block_steps - self.plan.skip_steps,
                                               now - self.timing))
        self.timing = None
        if block > 0 and block % 2 == 0 and (end := self._enough(now)) is not None:
            self.end = end
            self.agreed = self.stop.propose(count + AHEAD_STEPS) if self.stop is not None else count
            return
        if block > 0:   # block 0 runs under the setting the process started with, its cache as the job left it
            self._switch(self.arm(block))

    def _enough(self, now: float) -> AlternationEnd | None:
        pairs = len(self.blocks) // 2
        if resolved(self.log_ratios(), self.plan.target, self.plan.min_pairs):
            return AlternationEnd.RESOLVED
        if pairs >= self.plan.max_pairs:
            return AlternationEnd.MAX_PAIRS
        if self.started is not None and now - self.started >= self.plan.max_seconds:
            return AlternationEnd.MAX_SECONDS
        return None

    def log_ratios(self) -> list[float]:
        """Per whole pair: log(candidate's seconds per step / the other's)."""
        out = []
        for a, b in zip(self.blocks[0::2], self.blocks[1::2]):
            c, d = (a, b) if a.candidate else (b, a)
            out.append(math.log((c.seconds / c.steps) / (d.seconds / d.steps)))
        return out

    def _switch(self, candidate: bool) -> None:
        if not candidate and self.captured is None:
            self.captured = self.capture()
        problem = self.devices.switch(self.plan.candidate if candidate else self.plan.against)
        self.candidate_now = candidate
        if problem is not None:
            self.end, self.note = AlternationEnd.SWITCH_FAILED, problem
            del self.blocks[len(self.blocks) // 2 * 2:]
            self.restore()

    def restore(self) -> None:
        """Back to the candidate (the setting the process was started under, which its report reads back)."""
        if not self.candidate_now:
            self.devices.switch(self.plan.candidate)
            self.candidate_now = True

    def _finish(self) -> bool:
        self.restore()
        return True

    def record(self) -> Alternation:
        """The blocks for the process's report: whole pairs only."""
        return Alternation(against=self.plan.against_conf, block_steps=self.plan.block_steps,
                           skip_steps=self.plan.skip_steps, target=self.plan.target,
                           end=self.end or AlternationEnd.JOB_ENDED,
                           blocks=self.blocks[:len(self.blocks) // 2 * 2], note=self.note)


class TorchDevices:
    """`Devices` for the process's torch.cuda (`cuda()`: None before CUDA started)."""

    def __init__(self, cuda: Callable[[], Any], synced: Callable[[], float]):
        self.cuda = cuda
        self.synced = synced

    def switch(self, setting: str) -> str | None:
        from ..settings.conf import AllocConf
        from ..settings.readback import mismatch
        from .allocator import effective_settings

        cuda = self.cuda()
        if cuda is None:
            return "CUDA is not initialised"
        self.synced()
        cuda.empty_cache()
        try:
            cuda.memory._set_allocator_settings(setting)
        except Exception as exc:   # torch refused the string at run time
            return f"torch refused {setting!r} at run time: {type(exc).__name__}: {exc}"
        effective, readable = effective_settings()
        return mismatch(AllocConf.parse(setting), effective, readable)


def from_environment(environ: Any, job: Any, capture: Callable[[], Any], folder: str) -> Alternator | None:
    """The alternation ALLOCTUNE_HOOK_ALTERNATE asks for in this process (None: none), on `job`'s devices
    (`devices.CudaJob`), its stop agreed in the hook's `folder`; `capture`: the process's memory figures now."""
    text = environ.get(VARIABLE, "")
    if not text:
        return None
    return Alternator(AlternatePlan.from_env(text), TorchDevices(job.cuda, job.synced), capture, SharedStop(folder))


def finished(alternation: Alternator | None) -> Alternation | None:
    """At the process's report: back under the candidate (which the report reads back); the blocks, or None."""
    if alternation is None:
        return None
    alternation.restore()
    return alternation.record()


def captured(counter: Any) -> Any:
    """The memory figures a counter's alternation took at its first switch (None: no alternation, or no switch)."""
    alternation = getattr(counter, "alternation", None)
    return alternation.captured if alternation is not None else None
