"""The parent's side of an in-process confirmation (`TrialTask.alternate`, runtime/alternate.py inside the job): the
processes' blocks into the trial's measurement.

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
from ..runtime.peaks import ProcessReport


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
