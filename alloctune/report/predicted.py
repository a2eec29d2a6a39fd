"""A setting's predicted speed in words (decide/speed.py, decide/confirm.py): its table cells, always labelled as
predicted, and the sentences `words.py` gives for the speed plan's reasons (not measured, measured in rounds, the
confirmation pair against the prediction)."""
from __future__ import annotations

from ..decide.reasons import Code, Reason
from ..decide.speed import (PREDICTION_ERROR, PRICE_ERROR, PRICE_SHORTFALL_SEEN, AsyncPlan, MeasuredError, Confirmation,
                            PredictedSpeed, SpeedPrediction,
                            Unpredictable, Unpredicted)
from ..results.choices import ChoiceRecord
from ..settings.conf import conf_label
from ..units import format_bytes
from .tables import driver_count

PREDICTED_HEADER = "predicted\nslowdown"
PREDICTED_LEGEND = ("predicted slowdown = the step time the replay's driver calls per steady step predict, priced by "
                    "this GPU's calibration, against the default's measured step (a prediction, not a measurement); "
                    "? = not predicted")


PAIR_MARK = "1 pair"
IN_PROCESS_MARK = "in one process"


def pair_legend(f: Confirmation) -> str:
    if f.blocks:
        return (f"{IN_PROCESS_MARK} = measured in blocks of steps under the default and the setting in turn, inside "
                f"one run of the job (the cache emptied at each switch); the setting's peak reserved is its own part "
                f"of that run, up to its first switch (start-up, warm-up, the steps up to its replayed peak where it "
                f"was held to it, its first block); ± = the 95% interval's "
                f"half-width reached (measured); whether it agrees with the prediction is said below")
    return (f"{PAIR_MARK} = measured in one confirmation pair (the default, then the setting): only a difference "
            f"beyond about ±{f.detectable:.0%} stands out of its noise; whether it agrees with the prediction is said "
            f"below")


def confirmed_pair(choice: ChoiceRecord) -> Confirmation | None:
    """The confirmation pair the choice's winner rests on, if it rests on one (decide/confirm.confirmed)."""
    pairs = (Reason.from_record(r).figures for r in choice.reasons_data
             if r.code in (Code.CONFIRMED.value, Code.DISAGREES.value))
    return next((f for f in pairs if isinstance(f, Confirmation)), None)


def prediction(choice: ChoiceRecord, conf: str) -> SpeedPrediction | None:
    """The speed the choice predicts for its setting `conf` (`ChoiceRecord.predictions`), if it predicts one."""
    p = choice.predictions.get(conf)
    return None if p is None else SpeedPrediction.from_json(p, f"prediction for {conf_label(conf)!r}")


def pair_cell(f: Confirmation) -> str:
    """The 'vs default' cell of a confirmed winner: '1.03x ±1.2%, 12 blocks in one process', '0.99x ±17% 1 pair'."""
    if f.blocks:
        return f"{f.measured_ratio:.2f}x ±{f.detectable:.1%}, {f.blocks} blocks {IN_PROCESS_MARK}"
    return f"{f.measured_ratio:.2f}x ±{f.detectable:.0%} {PAIR_MARK}"


def predicted_cell(p: SpeedPrediction | None) -> str:
    """'+0.4%' (predicted), '?' (no prediction: `unpredicted` says why), '-' (none made)."""
    if p is None:
        return "-"
    return "?" if p.predicted_slowdown is None else f"{p.predicted_slowdown:+.1%}"


def calls_cell(p: SpeedPrediction | None) -> str:
    """The driver calls per steady step the prediction rests on."""
    return "-" if p is None else driver_count(p.work.calls)


def _counts(f: PredictedSpeed) -> str:
    return (f"{driver_count(f.calls)} driver calls and {driver_count(f.syncs)} syncs per steady step (the default: "
            f"{driver_count(f.default_calls)} and {driver_count(f.default_syncs)}, over {f.steps} steps)")


def slower_than(slowdown: float) -> str:
    """'4.0% slower than', '1.0% faster than', 'as fast as'."""
    return f"{slowdown:.1%} slower than" if slowdown > 0 else f"{-slowdown:.1%} faster than" if slowdown else "as fast as"


def measured_error(allowance: float, e: MeasuredError = PREDICTION_ERROR) -> str:
    """'where predictions were measured (...), they were off by -24.0 to +26.1 points (predicted minus measured),
    and on the H100 put 64 of 64 settings on the side of a 2% allowance the measurement did, where it could tell'."""
    words = (f"where predictions were measured against the GPU ({e.where}), they were off by {e.low * 100:+.1f} to "
             f"{e.high * 100:+.1f} points (predicted minus measured)")
    side = e.side(allowance)
    if side is None:
        return words
    clear, same = side
    on = f"on {e.sides_on} " if e.sides_on else ""
    return (words + f", and {on}put {same} of {clear} settings on the side of a {allowance:.0%} allowance the "
            f"measurement did, where it could tell")


def predicted_too_slow(f: PredictedSpeed) -> str:
    return (f"not measured: predicted {slower_than(f.slowdown)} the default, beyond the {f.max_slowdown:.0%} allowance, "
            f"from its {_counts(f)}; {measured_error(f.max_slowdown)}; --repeats auto measures it")


def not_negligible(f: PredictedSpeed) -> str:
    head = (f"predicted {slower_than(f.slowdown)} the default, within the {f.max_slowdown:.0%} "
            f"allowance, from its {_counts(f)}")
    if f.syncs > f.default_syncs:
        return head + "; it adds synchronisations, whose stall the prediction does not price"
    if f.worst_slowdown is None:   # a file from before the worst case was kept
        return head + ": too much driver work for the prediction alone to answer"
    return (head + f"; if its driver calls cost {PRICE_ERROR:g} times their price (on the H200 they cost up to "
            f"{PRICE_SHORTFALL_SEEN:g} times), it would be {slower_than(f.worst_slowdown)} the default, beyond the allowance")


_UNPREDICTED = {
    Unpredicted.NO_CALIBRATION: "no driver-call costs were measured for this GPU",
    Unpredicted.NO_STEP_TIME: "the default's time per step was not measured",
    Unpredicted.NO_STEADY_STEPS: "the trace marks no steady step to count its driver calls over",
    Unpredicted.NO_DRIVER_WORK: "its replay counted no driver work",
}


def unpredicted(f: Unpredictable) -> str:
    return f"its speed was not predicted: {_UNPREDICTED[f.why]}"


def _fits(f: AsyncPlan) -> str:
    return f"the {format_bytes(f.budget_bytes)} budget" if f.budget_bytes else "the card (no budget was set)"


def async_not_needed(f: AsyncPlan) -> str:
    assert f.winner is not None and f.winner_bytes is not None
    return (f"not measured: the simulator cannot replay it, and the native setting the replay prefers, "
            f"{conf_label(f.winner)}, already fits {_fits(f)} at {format_bytes(f.winner_bytes)} peak reserved; name "
            f"it with --conf (or use --repeats auto) to measure it")


def async_measured(f: AsyncPlan) -> str:
    why = "you named it" if f.named else f"no native setting fits {_fits(f)} in the replay"
    return f"{why}, and the simulator cannot replay it"


def confirmation(f: Confirmation, agrees: bool) -> str:
    if f.blocks:
        return _in_process(f, agrees)
    head = (f"one confirmation pair (the default, then this setting): throughput {f.measured_ratio:.3f}x the "
            f"default's, predicted {f.predicted_ratio:.3f}x from {driver_count(f.calls)} driver calls and "
            f"{driver_count(f.syncs)} syncs per steady step")
    if agrees:
        return (f"{head}: consistent with the prediction. One pair tells a difference from noise only beyond about "
                f"±{f.detectable:.0%} (two processes at ±{f.noise:.0%} each); only rounds (--repeats auto) can say "
                f"there is no significant difference")
    way = "slower" if f.measured_ratio < f.predicted_ratio else "faster"
    return (f"{head}: disagrees with the prediction, {way} by more than the about ±{f.detectable:.0%} one pair "
            f"can tell from noise (two processes at ±{f.noise:.0%} each)")


def _in_process(f: Confirmation, agrees: bool) -> str:
    head = (f"measured inside one run of the job, {f.blocks} blocks under the default and this setting in turn: "
            f"throughput {f.measured_ratio:.3f}x the default's ±{f.detectable:.1%} (95%), predicted "
            f"{f.predicted_ratio:.3f}x from {driver_count(f.calls)} driver calls and {driver_count(f.syncs)} syncs per "
            f"steady step")
    if agrees:
        return f"{head}: the prediction lies within the measured interval"
    way = "slower" if f.measured_ratio < f.predicted_ratio else "faster"
    return f"{head}: the prediction lies outside the measured interval (measured {way})"
