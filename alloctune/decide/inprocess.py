"""An in-process confirmation, judged: the blocks one process timed under the winner and the default in turn
(`results.alternation.Alternation`, runtime/alternate.py), as pairs of rates, and how long its blocks are. Pure.

Why one process. Between fresh processes a step rate moves by several percent (±6% on the H200, PROCESS_NOISE),
so one pair of processes resolves a ratio to about ±17%; inside one process the setting can be switched for every
key torch changes while it runs (settings/switching.py), and the noise left is the job's own from block to block.
Each pair of blocks (one of each setting, adjacent, the order flipping from pair to pair so that a steady drift
cancels) is one paired observation, like a round of `--repeats auto`; the paired t-interval on their log ratios
(`stats.compare_paired`, in `summary.py`) and the sequential test (`sequential.py`: the stop looked after every
pair) judge them as they judge rounds.

Blocks. Each block skips its first steps, where the cache emptied at the switch is refilled and new shapes meet
their first run, then times at least BLOCK_SECONDS of steps (a few steps of a variable-shape job vary by tens of
percent; a block's mean over seconds of them, much less). A job that ran too few steps for MIN_PAIRS pairs of
such blocks gets shorter ones, down to MIN_TIMED timed steps; with fewer it is confirmed by a pair of processes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from ..results.alternation import Alternation
from ..results.records import TrialRecord, TrialState

BLOCK_SECONDS = 2.0    # the timed part of a block, at the default's measured step time
SKIP_SECONDS = 0.5     # skipped at the start of each block, at least MIN_SKIP steps
MIN_SKIP = 2
MIN_TIMED = 3
TARGET = 0.01          # the resolution a run stops at: ±1% (95% half-width), half the default 2% allowance
MIN_PAIRS = 4
# How long a run may alternate. A job of fixed shapes reaches TARGET in a few pairs (transformers GPT-2 on an H100:
# 4 pairs, ±0.5%). On one H100 call, jobs whose batches change shape or are made on the host spread about 6-8%
# between two blocks of 2 s (a Trainer, a Lightning job, a ResNet: results/h100-in-process-2026-12-06) and would
# need 36-67 pairs, 3-6 minutes, for ±2%, the default allowance; on another, the same ResNet command reached ±0.5%
# in 4 pairs (results/h100-in-process-2026-12-06c). So up to 80 pairs or 5 minutes, for a job or a machine that
# spreads that much, after which the run states what it reached.
MAX_PAIRS = 80
MAX_SECONDS = 300.0


@dataclass(frozen=True)
class BlockPlan:
    """How one process alternates (runtime/alternate.AlternatePlan takes these)."""

    block_steps: int
    skip_steps: int
    target: float = TARGET
    min_pairs: int = MIN_PAIRS
    max_pairs: int = MAX_PAIRS
    max_seconds: float = MAX_SECONDS


def block_plan(step_seconds: float, steady_steps: int | None = None) -> BlockPlan | None:
    """Blocks for a job whose default steps take `step_seconds` and that runs `steady_steps` steps after its
    warm-up (None: as long as it is let); None where fewer than MIN_PAIRS pairs of the shortest blocks fit."""
    skip = max(MIN_SKIP, math.ceil(SKIP_SECONDS / step_seconds))
    timed = max(MIN_TIMED, math.ceil(BLOCK_SECONDS / step_seconds))
    if steady_steps is not None and (skip + timed) * 2 * MIN_PAIRS > steady_steps:
        room = steady_steps // (2 * MIN_PAIRS)   # steps per block that fit
        skip = min(skip, max(1, room // 3))
        timed = room - skip
        if timed < MIN_TIMED:
            return None
    return BlockPlan(skip + timed, skip)


def block_pairs(alternation: Alternation) -> list[tuple[float, float]]:
    """(the other setting's rate, the candidate's) in steps per second, per whole pair of blocks."""
    pairs = []
    blocks = alternation.blocks
    for a, b in zip(blocks[0::2], blocks[1::2]):
        if a.candidate == b.candidate or not (a.seconds > 0 and b.seconds > 0):
            continue
        mine, other = (a, b) if a.candidate else (b, a)
        pairs.append((other.steps / other.seconds, mine.steps / mine.seconds))
    return pairs


def alternations(trials: Iterable[TrialRecord]) -> list[Alternation]:
    """The alternations against the default that a setting's OK trials ran."""
    return [r.measurement.alternation for r in trials if r.state is TrialState.OK and r.measurement is not None
            and r.measurement.alternation is not None and r.measurement.alternation.against == ""]


def in_process_pairs(trials: Iterable[TrialRecord]) -> list[tuple[float, float]]:
    """Every pair of blocks a setting's trials timed in one process each: its comparison with the default rests
    on these when there are any (`summary.py`), instead of runs in separate processes."""
    return [pair for a in alternations(trials) for pair in block_pairs(a)]
