"""A hybrid sweep's speed plan (`--repeats confirm`, the default): from the replay's memory and each setting's
predicted speed (`speed.py`), the setting one paired GPU run confirms, those that need throughput rounds and those
not measured at all, each with its reason; and what the confirmation pair says against the prediction. Pure, no
words (`report/words.py` says the reasons).

The rules, over the native settings that fit in the replay, in the preference's order (`order.by_preference`: the
lowest memory first, ties to fewer keys), up to the first that is confirmed:

- a setting with no prediction (no calibration, no measured step of the default, no steady step in the trace) is
  measured in rounds (UNPREDICTED): nothing says it is as fast as the default;
- one predicted slower than the default by more than `max_slowdown` is not measured (PREDICTED_TOO_SLOW), its
  reason quoting how far predictions were from measurements where both were made (`speed.PREDICTION_ERROR`);
- one predicted within the allowance that its prediction cannot answer alone (`SpeedPrediction.answers_alone`:
  its worst case, the extra driver time at `speed.PRICE_ERROR` times its price, is beyond the allowance, or it
  adds synchronisations) is measured in rounds (NOT_NEGLIGIBLE): the prediction's error could change the answer;
- the first that its prediction answers, or the default, is the winner: one pair (the default, then it)
  confirms it, and every setting after it loses to it on memory or on a tie (LOSES_ON_MEMORY, LOSES_TIE);
- cudaMallocAsync, which the simulator cannot replay, is measured in rounds when the user named it or when no
  native setting fits in the replay (ASYNC_MEASURED), else not (ASYNC_NOT_NEEDED): its memory can at best spare
  what the budget (or the card) does not need.

The winner of a command is confirmed inside one process where torch can switch it and the default while the job
runs (`in_process`: settings/switching.py, the default fits in the replay, the job is long enough for the blocks of
inprocess.py, and neither setting's driver calls are a material part of a step: `IN_PROCESS_DRIVER_SHARE`): its
blocks then carry the comparison with the default (summary.py), whose interval is the resolution
stated, and the confirmation agrees where the predicted ratio lies inside it. Otherwise one pair of processes:
the confirmation agrees (CONFIRMED) unless its measured ratio is further from the predicted one than one pair's
noise allows (`parameters.PAIR_DETECTABLE`: two processes at `PROCESS_NOISE` each), when it DISAGREES; a
confirmation that found the winner slower than predicted beyond that noise sends it to rounds (`needs_rounds`),
as the answer may then change. One pair says "consistent with the prediction" or "disagrees", never "no
significant difference": only rounds test that.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Collection, Mapping, Sequence

from ..settings.conf import AllocConf
from ..settings.switching import switch_strings
from .choice import Choice, tie_break
from .inprocess import BlockPlan, alternations, block_plan
from .order import by_preference, lower_beyond_tie
from .parameters import DEFAULT_TIE, PAIR_DETECTABLE, PROCESS_NOISE
from .reasons import Code, Reason
from .quoted import AgainstWinner, Unmeasured
from .speed import AsyncPlan, Confirmation, PredictedSpeed, SpeedPrediction, Unpredictable, Unpredicted
from .stats import Comparison
from .summary import SettingResult


# A setting switched to while the job runs allocates beside the segments made under the setting the process started
# with: on an H100 (torch 2.11), a job that empties the cache every step, started under the default and switched to
# expandable segments, mapped 21.75 page ranges a step, where a process under expandable segments from its start
# maps 44.6 (the replay; results/h100-speed-model-v-2026-12-06). Its driver work, and what it costs, are then not
# the setting's. Where the replay prices either setting's driver calls above this share of the default's step, a
# pair of processes confirms it instead (half a percent: a quarter of the default 2% allowance).
IN_PROCESS_DRIVER_SHARE = 0.005


@dataclass(frozen=True)
class SpeedPlan:
    """What the GPU runs for one environment after the replay."""

    winner: str | None                        # confirmed by one pair ('' = the default); None: no native fits
    rounds: tuple[tuple[str, Reason], ...]    # measured in rounds (with the default), each with why
    skipped: tuple[tuple[str, Reason], ...]   # not measured, each with why


def plan_speed(replayed: list[SettingResult], predicted: Mapping[str, SpeedPrediction], switches: Collection[str],
               max_slowdown: float, tie: float = DEFAULT_TIE, named: Collection[str] = ()) -> SpeedPlan:
    """The plan for one environment: `replayed` its replays (one budget), `predicted` each one's prediction,
    `switches` the backend switches planned (not replayed), `named` the settings the user named."""
    rounds: list[tuple[str, Reason]] = []
    skipped: list[tuple[str, Reason]] = []
    fitting = [s for s in by_preference((s for s in replayed if not s.switches_backend), tie) if s.fits]
    winner: SettingResult | None = None
    for s in fitting:
        if winner is not None:   # the default, the baseline, runs whatever else does
            skipped += [] if s.is_default else [(s.conf, _loses(s, winner, tie, predicted.get(s.conf), max_slowdown))]
            continue
        p = predicted.get(s.conf)
        if s.is_default or (p is not None and p.answers_alone(max_slowdown)):
            winner = s
        elif p is None or p.predicted_slowdown is None:
            rounds.append((s.conf, Reason(Code.UNPREDICTED, Unpredictable(
                p.unpredicted if p is not None and p.unpredicted else Unpredicted.NO_DRIVER_WORK))))
        elif not _within(p, max_slowdown):
            skipped.append((s.conf, Reason(Code.PREDICTED_TOO_SLOW, PredictedSpeed.of(p, max_slowdown))))
        else:
            rounds.append((s.conf, Reason(Code.NOT_NEGLIGIBLE, PredictedSpeed.of(p, max_slowdown))))
    first = fitting[0] if fitting else None
    budget = replayed[0].budget_bytes if replayed else None
    for conf in switches:
        plan = AsyncPlan(first.conf if first else None, first.peak_reserved_bytes if first else None, budget,
                         AllocConf.parse(conf) in {AllocConf.parse(c) for c in named})
        (rounds if plan.named or first is None else skipped).append(
            (conf, Reason(Code.ASYNC_MEASURED if plan.named or first is None else Code.ASYNC_NOT_NEEDED, plan)))
    return SpeedPlan(winner.conf if winner is not None else None, tuple(rounds), tuple(skipped))


def _within(p: SpeedPrediction, max_slowdown: float) -> bool:
    return p.predicted_slowdown is not None and p.predicted_slowdown <= max_slowdown


def _loses(s: SettingResult, winner: SettingResult, tie: float, p: SpeedPrediction | None,
           max_slowdown: float) -> Reason:
    """Why `s`, after the winner in the preference's order, is not measured: more memory beyond the tie, or a tie
    it loses (with its predicted slowdown where that is beyond the allowance: the tie alone would hide it)."""
    measure, mine, theirs = s.compared_with(winner)
    if lower_beyond_tie(winner, s, tie):
        return Reason(Code.LOSES_ON_MEMORY, Unmeasured(measure, mine, winner.conf, theirs, tie, predicted=True))
    slow = p is not None and p.predicted_slowdown is not None and not _within(p, max_slowdown)
    return Reason(Code.LOSES_TIE, AgainstWinner(measure, mine, theirs, None, tie_break(winner, s, [winner, s], tie),
                                                p.predicted_slowdown if slow and p else None,
                                                max_slowdown if slow else None))


@dataclass(frozen=True)
class InProcessPlan:
    """The winner confirmed inside one process (runtime/alternate.py): the strings that set it and the default in
    turn (settings/switching.py), and its blocks."""

    strings: tuple[str, str]   # (the winner's, the default's), whole
    blocks: BlockPlan


def in_process(winner: str, torch_version: str, default_fits: bool, step_seconds: float | None,
               steady_steps: int | None, prediction: SpeedPrediction | None,
               waits: int = 0) -> InProcessPlan | None:
    """How the winner is confirmed inside one process, or None where a pair of processes confirms it: the default
    won (nothing to compare), the default does not fit (its blocks would fail the job), a key torch cannot switch
    while the job runs, no measured step of the default, a job too short for MIN_PAIRS pairs of blocks after the
    `waits` steady steps its blocks wait for (those up to the step of the winner's replayed peak, which its memory
    figures, taken at the first switch, must cover), or driver calls of either setting that may be a material part
    of a step (`driver_share`)."""
    if not winner or not default_fits or not step_seconds or step_seconds <= 0:
        return None
    if driver_share(prediction) is None or excess_driver_share(prediction) is not None:
        return None
    left = None if steady_steps is None else steady_steps - waits
    if left is not None and left <= 0:
        return None
    strings = switch_strings(AllocConf.parse(winner), AllocConf(), torch_version)
    blocks = block_plan(step_seconds, left)
    return InProcessPlan(strings, blocks) if strings is not None and blocks is not None else None


def driver_share(p: SpeedPrediction | None) -> float | None:
    """The larger of the winner's and the default's priced driver seconds per steady step, over the default's
    measured step; where nothing is priced (no calibration), 0 if the replay counted no driver call under either
    (none to price), else None (unknown)."""
    if p is None:
        return None
    if p.driver_seconds is not None and p.default_driver_seconds is not None and p.default_step_seconds:
        return max(p.driver_seconds.total, p.default_driver_seconds.total) / p.default_step_seconds
    return 0.0 if p.work.calls == 0 and p.default_work.calls == 0 else None


def excess_driver_share(p: SpeedPrediction | None) -> float | None:
    """`driver_share` where it passes IN_PROCESS_DRIVER_SHARE (why `in_process` declines, which the sweep says);
    None where it does not, or is unknown."""
    share = driver_share(p)
    return share if share is not None and share > IN_PROCESS_DRIVER_SHARE else None


def confirmation_of(s: SettingResult, p: SpeedPrediction) -> Reason | None:
    """The winner's confirmation against its prediction: its blocks in one process where it ran them, else its one
    pair of processes; None without a prediction or a measurement."""
    blocks = sum(len(a.blocks) for a in alternations(s.trials))
    if blocks:
        return _in_process(s.vs_default, s.pairs, p, blocks) if s.vs_default is not None else None
    return confirmation(s.pairs[0], p) if len(s.pairs) == 1 else None


def _in_process(c: Comparison, pairs: Sequence[tuple[float, float]], p: SpeedPrediction,
                blocks: int) -> Reason | None:
    """Blocks in one process (`pairs` of rates) against the prediction: it disagrees where the predicted ratio
    lies outside the measured ratio's 95% interval (`c`)."""
    if p.predicted_slowdown is None or c.ci_low is None or c.ci_high is None or c.half_width is None:
        return None
    predicted = 1 / (1 + p.predicted_slowdown)
    spread = statistics.stdev(math.log(mine / other) for other, mine in pairs)
    return Reason(Code.CONFIRMED if c.ci_low <= predicted <= c.ci_high else Code.DISAGREES,
                  Confirmation(c.ratio, predicted, p.work.calls, p.work.syncs, spread, c.half_width, blocks))


def confirmation(pair: tuple[float, float], p: SpeedPrediction) -> Reason | None:
    """The confirmation pair (the default's throughput, the winner's) against the winner's prediction; None where
    it has none."""
    if p.predicted_slowdown is None or pair[0] <= 0:
        return None
    measured, predicted = pair[1] / pair[0], 1 / (1 + p.predicted_slowdown)
    off = abs(math.log(measured / predicted)) > math.log1p(PAIR_DETECTABLE)
    return Reason(Code.DISAGREES if off else Code.CONFIRMED,
                  Confirmation(measured, predicted, p.work.calls, p.work.syncs, PROCESS_NOISE, PAIR_DETECTABLE))


def needs_rounds(reason: Reason | None) -> bool:
    """One confirmation pair found the winner slower than predicted beyond its noise: its answer may change. (Blocks
    in one process already time the ratio better than rounds of processes would: the choice judges them.)"""
    f = reason.figures if reason is not None else None
    return isinstance(f, Confirmation) and reason is not None and reason.code is Code.DISAGREES \
        and not f.blocks and f.measured_ratio < f.predicted_ratio


def confirmed(choice: Choice, predicted: Mapping[str, SpeedPrediction]) -> Choice:
    """A measured choice whose winner was confirmed: by one pair of processes, its throughput reason is the
    confirmation against the prediction (one pair has no interval, so no precision either); by blocks in one
    process, the confirmation follows the throughput reason their interval gave. Any other choice as it is."""
    best = choice.best
    p = predicted.get(best.conf) if best is not None else None
    if best is None or best.is_default or choice.simulated or p is None:
        return choice
    said = confirmation_of(best, p)
    if said is None:
        return choice
    if isinstance(said.figures, Confirmation) and said.figures.blocks:
        return replace(choice, reasons=choice.reasons + (said,))
    reasons = tuple(said if r.code is Code.THROUGHPUT_UNTESTED else r for r in choice.reasons)
    return replace(choice, reasons=reasons, precision=None)
