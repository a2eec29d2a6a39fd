"""The parent's side of an in-process confirmation (`TrialTask.alternate`, runtime/alternate.py inside the job): what
the task asks the job (`alternate_env`), and the processes' blocks into the trial's measurement (`alternated`).

The trial's memory is what its processes' reports hold: with an alternation, their figures at the first switch,
its own setting's part of the run. Its throughput is its own blocks' rate: the rate the trial measured over its
window (both settings, in the unit it measured) scaled by the candidate's blocks' steps per second over the
window's. The blocks themselves go into `Measurement.alternation`, of the first process (in rank order) that timed
any: every rank switches at the same steps, and decide/inprocess.py pairs one process's blocks.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..results.records import Measurement
from ..runtime.alternate import AlternatePlan
from ..runtime.peaks import ProcessReport


def alternate_env(strings: tuple[str, str], block_steps: int, skip_steps: int, target: float, min_pairs: int,
                  max_pairs: int, max_seconds: float) -> str:
    """`TrialTask.alternate` (ALLOCTUNE_HOOK_ALTERNATE): the trial's own setting and the default in turn, `strings`
    the whole strings that set them (settings/switching.py), in blocks as decide/inprocess.py sized them."""
    return AlternatePlan(strings[0], strings[1], "", block_steps, skip_steps, target, min_pairs, max_pairs,
                         max_seconds).to_env()


def block_steps(alternate: str) -> int:
    """The steps per block a task's `alternate` asks for."""
    return AlternatePlan.from_env(alternate).block_steps


def alternated(measured: Measurement, processes: Sequence[ProcessReport]) -> Measurement:
    """`measured` with the blocks of the process that alternated, and its own blocks' rate; as it is without."""
    runs = [p.alternation for p in processes if p.alternation is not None]
    alternation = next((a for a in runs if a.blocks), runs[0] if runs else None)
    if alternation is None:
        return measured
    mine = [b for b in alternation.blocks if b.candidate]
    steps, seconds = sum(b.steps for b in mine), sum(b.seconds for b in mine)
    window = (measured.measured_steps / measured.measured_seconds
              if measured.measured_steps and measured.measured_seconds else None)
    if not (steps and seconds and window and measured.throughput):
        return replace(measured, alternation=alternation)
    return replace(measured, alternation=alternation, throughput=measured.throughput * steps / seconds / window,
                   measured_seconds=seconds, measured_steps=steps)
