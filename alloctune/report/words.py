"""The reasons in words: each reason of the choice (`decide/reasons.py`) said as the one sentence summary.md, the
terminal and choice.json give, from its figures alone (a setting that was refused with less memory than the kept
default is said in that setting's own runner-up reason). What the table of known problems holds, and what a job
did, is said in `problems.py`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from ..decide.order import TieRule
from ..decide.reasons import Code, Reason
from ..decide.quoted import (AgainstWinner, BackendSkipped, Contaminated, DefaultFailed, DeviceSpread, Failed,
                             KeepDefault, KnownProblem, Measure, MoreMemory, NothingFits, Precision,
                             RefusedLower, Retries, SavesMemory, Stop, Throughput, TieBreak, Ties, TooSlow, Unmeasured,
                             Unstable, WholeCard)
from ..results.choices import ChoiceRecord, ReasonRecord
from ..results.figures import Comparison, Contamination, MemoryMeasure, SettingState
from ..results.folder import Skipped
from ..results.names import SWEEP_FILE
from ..results.records import ThroughputSource
from ..results.vocabulary import signed_percent, times
from ..units import figure, format_bytes, format_number, plural
from .provenance import dry_run_words
from ..settings.conf import conf_label
from .predicted import (async_measured, async_not_needed, confirmation, not_negligible, predicted_too_slow,
                        slower_than, unpredicted)
from . import growth
from .problems import known_problem

Refusals = Mapping[str, Reason]   # conf -> why it may not be recommended (REFUSED_LOWER says them)


def format_rate(value: float | None, unit: str | None = None) -> str:
    """'12,345 tokens/s', '3.21 samples/s'; '-' for None."""
    if value is None:
        return "-"
    return f"{format_number(value)} {unit or 'units'}/s"


def _retries(count: int | None) -> str:
    return f"{count} alloc retr{'y' if count == 1 else 'ies'}" if count else "no alloc retries"


def _pct(a: float, b: float) -> str:
    """a against b as a signed percentage: '-33.3%'."""
    return signed_percent(a / b - 1) if b else "n/a"


def _spread(value: float | None) -> float:
    return float("inf") if value is None else value   # None: not finite (reasons.finite)


def _test(c: Comparison) -> str:
    return f"paired t-test over {c.pairs} rounds," if c.pairs else "Welch"


def _interval(c: Comparison) -> str:
    """'; 95% interval 0.981-1.004, ±1.1%': the half-width is the smallest difference the sweep could detect."""
    if c.ci_low is None or c.ci_high is None or c.half_width is None:
        return ""
    return f"; 95% interval {figure(c.ci_low, '.3f')}-{figure(c.ci_high, '.3f')}x, ±{figure(c.half_width, '.1%')}"


_FAILURES = {SettingState.OOM: "does not fit: out of memory", SettingState.CRASHED: "crashed",
             SettingState.TIMEOUT: "timed out",
             SettingState.MISMATCH: "the allocator settings that took effect differ from those asked for"}


def _failed(f: Failed, _: Refusals | None = None) -> str:
    oom = f.state is SettingState.OOM
    budget = f" under the {format_bytes(f.budget_bytes)} budget" if oom and f.budget_bytes else ""
    detail = f" ({f.error})" if f.error and not oom else ""
    return f"{_FAILURES[f.state]}{budget} in {f.failed} of {f.repeats} repeat{'s' if f.repeats != 1 else ''}{detail}"


def _more_memory(f: MoreMemory, _: Refusals) -> str:
    return (f"raises {f.measure} to {format_bytes(f.peak_bytes)} "
            f"({_pct(f.peak_bytes, f.default_bytes)} against the default's {format_bytes(f.default_bytes)})")


def _more_retries(f: Retries, _: Refusals) -> str:
    return (f"needs {_retries(f.retries)} where the default needs {_retries(f.default_retries)}: "
            f"each retry frees the cache and synchronises the device, a slowdown the replay cannot time")


def _too_slow(f: TooSlow, _: Refusals) -> str:
    c = f.vs_default
    return (f"saves {format_bytes(f.saved_bytes)} but is {(1 - c.ratio) * 100:.1f}% slower than the default, "
            f"significantly beyond the {f.max_slowdown:.0%} allowance (one-sided {_test(c)} p = {c.p_slower:.2g})")


def _throughput(code: Code) -> Callable[[Throughput, Refusals], str]:
    def say(f: Throughput, _: Refusals) -> str:
        c = f.vs_default
        medians = f"{format_rate(f.median, f.unit)} against {format_rate(f.default_median, f.default_unit)}"
        # medians that point the other way from the paired ratio are said to be within its spread
        head = (f"throughput {times(c.ratio, 3)} the default's (" +
                (f"medians {medians}, the other way within the pairs' spread" if c.against(f.median, f.default_median)
                 else f"median {medians}") +
                "): ")
        if code is Code.THROUGHPUT_UNTESTED:
            return head + ("NOT TESTED, one repeat cannot tell a difference from noise (fresh processes vary by "
                           "several percent); confirm with --repeats 3 or more")
        test = f"({_test(c)} p = {c.p_value:.2g}{_interval(c)})"
        if code is Code.THROUGHPUT_SAME:
            return head + f"no significant difference {test}"
        if code is Code.THROUGHPUT_NEGLIGIBLE:
            return head + f"statistically detectable {test} but under {f.negligible:.0%}: no practical difference"
        allowance = f", inside the {f.max_slowdown:.0%} allowance" if c.ratio < 1 else ""
        return head + f"significantly {c.verdict} {test}{allowance}"
    return say


def _saves_memory(f: SavesMemory, _: Refusals) -> str:
    text = (f"{f.measure} {format_bytes(f.peak_bytes)} against the default's {format_bytes(f.default_bytes)} "
            f"({_pct(f.peak_bytes, f.default_bytes)}, saves {format_bytes(f.default_bytes - f.peak_bytes)})")
    if f.reserved_ratio is not None and f.default_reserved_ratio is not None:
        text += f"; reserved/allocated {f.reserved_ratio:.2f} against {f.default_reserved_ratio:.2f}"
    if f.small_gain is not None:
        text += (f". A small gain: the default is within {f.small_gain:.0%} of it, so keeping the default is "
                 f"sound too")
    return text


def _nothing_fits(f: NothingFits, _: Refusals) -> str:
    budget = f" under the {format_bytes(f.budget_bytes)} budget" if f.budget_bytes else ""
    return (f"nothing fits{budget}: all {f.settings} settings failed ("
            + ", ".join(f"{s.state}: {s.count}" for s in f.states) + ")")


def _no_default(f: Measure, _: Refusals) -> str:
    return f"the default was not run in this group: chosen on {f.measure} alone"


def _default_failed(f: DefaultFailed, _: Refusals) -> str:
    return (f"the default {_failed(f.default)}; {conf_label(f.winner)} is the lowest {f.measure} "
            f"({format_bytes(f.peak_bytes)}) of the {f.fitting} settings that fit")


def _keep_default(f: KeepDefault, _: Refusals) -> str:
    text = (f"no setting lowers {f.measure} by more than {f.tie:.0%} below the default's "
            f"{format_bytes(f.default_bytes)} and meets the rules: keep the default")
    if f.closest is not None and f.closest_bytes is not None:
        text += (f" (closest: {conf_label(f.closest)} at {format_bytes(f.closest_bytes)}, "
                 f"{_pct(f.closest_bytes, f.default_bytes)})")
    return text


def _refused(head: str, separator: str) -> Callable[[RefusedLower, Refusals], str]:
    """'N settings <head>', then each refused setting and its runner-up reason; `head` says 'were', given one
    setting 'was'."""
    def say(f: RefusedLower, refusals: Refusals) -> str:
        verb = head if len(f.refused) != 1 else head.replace("were ", "was ", 1)
        return (f"{plural(len(f.refused), 'setting')} {verb}: "
                + "; ".join(f"{conf_label(conf)}{separator}{sentence(refusals[conf])}" for conf in f.refused))
    return say


def _sim_retries(f: Retries, _: Refusals) -> str:
    same = (f.retries or 0) == (f.default_retries or 0)
    return f"needs {_retries(f.retries)}, " + ("like the default" if same
                                               else f"fewer than the default's {f.default_retries}")


def _won(t: TieBreak) -> str:
    """Why the winner beat another on a tie, said of the winner."""
    return {TieRule.NATIVE: "as a native-allocator setting over a backend switch",
            TieRule.STABLE: "as its peak repeated exactly while the other's moved between repeats",
            TieRule.SIMPLER: f"as the simpler setting ({plural(t.winner_keys, 'key')} against {t.loser_keys})",
            TieRule.LOWER_PEAK: "with the lower peak", TieRule.NAME: "(equal in every rule; by name)",
            TieRule.OUT_OF_TIE: f"before any tie rule: the other is {_beater(t)}"}[t.rule]


def _lost(t: TieBreak) -> str:
    """The same, said of the loser."""
    return {TieRule.NATIVE: "it switches the allocator backend, the winner keeps the native allocator",
            TieRule.STABLE: f"its peak moved between repeats (+{_spread(t.loser_spread):.1%}), the winner's "
                            f"repeated exactly",
            TieRule.SIMPLER: f"it sets {plural(t.loser_keys, 'key')} against {t.winner_keys}",
            TieRule.LOWER_PEAK: "the winner's peak is lower", TieRule.NAME: "the same peak; decided by name",
            TieRule.OUT_OF_TIE: f"before any tie rule, it is {_beater(t)}"}[t.rule]


def _beater(t: TieBreak) -> str:
    """How a tie's loser was put out of the contenders (`order.beaten_by`): ties are not transitive."""
    return (f"more than {t.tie or 0:.0%} above {conf_label(t.beaten_by or '')} ({format_bytes(t.beaten_by_bytes)}), "
            "which the winner is within")


def _ties(f: Ties, _: Refusals) -> str:
    return "; ".join(f"{conf_label(t.conf)} came within {f.tie:.0%} of its {t.measure or f.measure} "
                     f"({format_bytes(t.peak_bytes)}, {_pct(t.peak_bytes, t.winner_bytes or f.winner_bytes)}); "
                     f"{conf_label(f.winner)} wins the tie {_won(t.tie_break)}" for t in f.tied)


def _unstable(f: Unstable, _: Refusals) -> str:
    return (f"caution: its peak reserved disagreed across repeats by {_spread(f.spread):.1%} "
            f"(the table shows the median)")


def _contaminated(f: Contaminated, _: Refusals) -> str:
    def one(conf: str, c: Contamination) -> str:
        context = (f"its {format_bytes(c.context_bytes)} outside the allocator" if c.context_measured
                   else f"{format_bytes(c.context_bytes)} allowed for the CUDA context and libraries")
        return (f"{conf_label(conf)} repeat {c.repeat + 1} read {format_bytes(c.device_bytes)} of device memory, more "
                f"than {c.tie:.0%} above its peak reserved {format_bytes(c.reserved_bytes)} plus {context}")

    parts = [one(s.conf, c) for s in f.settings for c in s.repeats]
    used = "; ".join(f"{conf_label(s.conf)} keeps {format_bytes(s.used_bytes)} from its other repeats"
                     if s.used_bytes is not None else f"{conf_label(s.conf)} has no device figure left"
                     for s in f.settings)
    return (f"device memory contaminated by other processes on the GPU, not used: {'; '.join(parts)} ({used})")


def _device_spread(f: DeviceSpread, _: Refusals) -> str:
    return ("device memory moved between repeats by more than "
            f"{f.agreement:.0%}, the lowest is used (other processes only add to it): "
            + "; ".join(f"{conf_label(s.conf)} +{_spread(s.spread):.1%}, {format_bytes(s.used_bytes)} used"
                        for s in f.settings))


def _whose(predicted: bool) -> str:
    return "replayed" if predicted else "measured"   # the vocabulary's basis (results/vocabulary.py)


def _loses_on_memory(f: Unmeasured, _: Refusals) -> str:
    head = f"not measured on the GPU: its {f.measure} ({format_bytes(f.peak_bytes)}, {_whose(f.predicted)}) is"
    if not f.winner:
        return f"{head} above the default's ({format_bytes(f.winner_bytes)}), and raising memory is never recommended"
    return (f"{head} more than {f.tie:.0%} above {conf_label(f.winner)}'s ({format_bytes(f.winner_bytes)}), which was not "
            f"refused")


def _backend_skipped(f: BackendSkipped, _: Refusals) -> str:
    return (f"not measured: {conf_label(f.winner)}'s peak reserved ({format_bytes(f.winner_bytes)}, "
            f"{_whose(f.predicted)}) is within {f.tie:.0%} of the program's peak requested bytes "
            f"({format_bytes(f.requested_bytes)}), and no allocator holds less than the live bytes: a backend switch "
            f"can at best tie, and a tie goes to the native allocator")


def _against_winner(f: AgainstWinner, _: Refusals) -> str:
    c = f.vs_default
    diff = f"; throughput {times(c.ratio, 3)} the default's ({c.verdict})" if c is not None else ""
    pct = _pct(f.peak_bytes, f.winner_bytes)
    if f.predicted_slowdown is not None and f.max_slowdown is not None:
        diff += (f"; also predicted {slower_than(f.predicted_slowdown)} the default from its driver calls, beyond "
                 f"the {f.max_slowdown:.0%} allowance")
    if f.tie_break is not None:
        return (f"ties with the winner on {f.measure} ({format_bytes(f.peak_bytes)}, {pct}) but loses the tie: "
                f"{_lost(f.tie_break)}{diff}")
    return f"costs {format_bytes(f.peak_bytes - f.winner_bytes)} more {f.measure} than the winner ({pct}){diff}"


_BLOCKS_STOPPED = {Stop.JOB_ENDED: "the job ended", Stop.MAX_PAIRS: "it ran the most pairs it is given",
                   Stop.MAX_SECONDS: "it ran for as long as it is given",
                   Stop.AGREED: "another process of the job stopped it",
                   Stop.SWITCH_FAILED: "torch did not take a switch",
                   Stop.RESOLVED: "its stop rule's normal interval met the target, and Student's t is wider at so "
                                  "few pairs"}


def _precision(f: Precision, _: Refusals) -> str:
    assert f.detectable is not None
    got = f"the smallest slowdown this sweep could detect is {f.detectable:.1%} (95% interval ±{f.detectable:.1%}"
    if f.stop is None:
        return got + f" after {f.rounds} rounds, within the ±{f.goal:.0%} goal)"
    if f.stop in _BLOCKS_STOPPED:
        need = (f"; at this spread between pairs ±{f.goal:.0%} needs about {f.rounds_needed} pairs, a longer run of "
                f"the job" if f.rounds_needed is not None else "")
        return (got + f"): wider than the ±{f.goal:.0%} goal because the blocks in one process stopped after "
                      f"{plural(f.rounds, 'pair')}: {_BLOCKS_STOPPED[f.stop]}{need}")
    why = {Stop.FIXED_REPEATS: f"--repeats fixed {f.rounds} rounds",
           Stop.MAX_REPEATS: f"the sweep stopped at --max-repeats {f.max_repeats}",
           Stop.TIME_BUDGET: f"the time budget ran out (or the sweep was interrupted) after "
                             f"{plural(f.rounds, 'round')}",
           Stop.SETTLED: f"after {plural(f.rounds, 'round')} the sequential test already answered whether it "
                         f"is slower than the {f.goal:.0%} allowance, which settles the choice"}[f.stop]
    need = (f"; at this spread between rounds ±{f.goal:.0%} needs about {f.rounds_needed} rounds"
            if f.rounds_needed is not None else "")
    return got + f"): wider than the ±{f.goal:.0%} goal because {why}{need}"


def _whole_card(f: WholeCard, _: Refusals) -> str:
    def joined(items: list[str]) -> str:
        return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else items[0]

    one = len(f.settings) == 1
    return (f"{joined([conf_label(s.conf) for s in f.settings])} took (nearly) the whole card: {f.measure} "
            f"{joined([format_bytes(s.peak_bytes) for s in f.settings])} of its {format_bytes(f.device_bytes)}, so "
            f"{'it fits' if one else 'they fit'} only because nothing else runs on the card")


def _known(head: str) -> Callable[[KnownProblem, Refusals], str]:
    return lambda f, _: known_problem(f, head)


def _fixed(text: str) -> Callable[[Any, Refusals], str]:
    return lambda f, _: text


_SAY: dict[Code, Callable[[Any, Refusals], str]] = {
    Code.SIMULATED: _fixed("replayed from a recorded allocation trace: decided on memory alone (no throughput "
                           "measured)"),
    Code.DRY_RUN: lambda f, _: (f"replayed from {dry_run_words(f.card, f.table, f.made_up, f.invented)}: decided "
                                f"on memory alone, from the trace a dry run made without a GPU; nothing was measured"),
    Code.NOTHING_FITS: _nothing_fits,
    Code.NO_DEFAULT: _no_default,
    Code.DEFAULT_FAILED: _default_failed, Code.KEEP_DEFAULT: _keep_default,
    Code.REFUSED_LOWER: _refused("with less memory were refused", " "),
    Code.SAVES_MEMORY: _saves_memory, Code.SIM_RETRIES: _sim_retries,
    Code.THROUGHPUT_UNCOMPARED: _fixed("throughput was not compared (no throughput measured on one side)"),
    **{code: _throughput(code) for code in (Code.THROUGHPUT_UNTESTED, Code.THROUGHPUT_SAME,
                                            Code.THROUGHPUT_NEGLIGIBLE, Code.THROUGHPUT_DIFFERS)},
    Code.DEVICE_MEMORY: _fixed(f"memory compared as {MemoryMeasure.DEVICE} (what the driver reports in use, CUDA "
                               f"context included) between settings of different backends, as cudaMallocAsync's "
                               f"'reserved' is the driver pool's, not comparable with the native allocator's; "
                               f"settings of one backend by {MemoryMeasure.RESERVED}, which is exact"),
    Code.DEVICE_CONTAMINATED: _contaminated, Code.DEVICE_SPREAD: _device_spread,
    Code.LOSES_ON_MEMORY: _loses_on_memory, Code.BACKEND_SKIPPED: _backend_skipped,
    Code.TIES: _ties, Code.UNSTABLE: _unstable,
    Code.REFUSED_UNSAFE: _refused("were refused for what a short trial does not show", ": "),
    Code.KNOWN_CAVEAT: _known("caution: the chosen setting is "),
    Code.GROWTH_STEADY: lambda f, _: growth.steady(f), Code.GROWTH_UNDECIDED: lambda f, _: growth.undecided(f),
    Code.KNOWN_PROBLEM: _known(""), Code.GROWING: lambda f, _: growth.growing(f),
    Code.FAILED: _failed, Code.MORE_MEMORY: _more_memory, Code.MORE_RETRIES: _more_retries, Code.TOO_SLOW: _too_slow,
    Code.LOSES_TIE: _against_winner, Code.COSTS_MORE: _against_winner,
    Code.PRECISION_UNKNOWN: _fixed("throughput was not compared with an interval (fewer than 2 rounds with both "
                                   "the default and the setting): no slowdown could be detected"),
    Code.PRECISION_REACHED: _precision, Code.PRECISION_SHORT: _precision,
    Code.WHOLE_CARD: _whole_card,
    Code.PREDICTED_TOO_SLOW: lambda f, _: predicted_too_slow(f), Code.NOT_NEGLIGIBLE: lambda f, _: not_negligible(f),
    Code.UNPREDICTED: lambda f, _: unpredicted(f), Code.ASYNC_NOT_NEEDED: lambda f, _: async_not_needed(f),
    Code.ASYNC_MEASURED: lambda f, _: async_measured(f),
    Code.CONFIRMED: lambda f, _: confirmation(f, True), Code.DISAGREES: lambda f, _: confirmation(f, False),
}


def sentence(reason: Reason, refusals: Refusals = {}) -> str:
    """`reason` in words; `refusals`: the runners-up's reasons, for REFUSED_LOWER and REFUSED_UNSAFE."""
    return _SAY[reason.code](reason.figures, refusals)


def worded(record: ChoiceRecord) -> ChoiceRecord:
    """`record` (as decide/record.py builds it) with each reason that has its data said in words: the decision, the
    reasons, each runner-up's why and the precision, as choice.json keeps them beside the data and the reports
    print them. A runner-up's reason is said from its own figures; a refusal of lower settings quotes theirs."""
    refusals = {u.conf: Reason.from_record(u.why_data) for u in record.runners_up if u.why_data is not None}

    def said(data: ReasonRecord | None, text: str) -> str:
        return text if data is None else sentence(Reason.from_record(data), refusals)

    return replace(record, decision=said(record.decision_data, record.decision),
                   reasons=tuple(said(r, "") for r in record.reasons_data) or record.reasons,
                   runners_up=tuple(replace(u, why=said(u.why_data, u.why)) for u in record.runners_up),
                   precision=said(record.precision_data, record.precision))


# Where a trial's throughput came from (`Measurement.throughput_source`), as summary.md says it.
TIME_SOURCES = {
    ThroughputSource.TIMED_PASS: "the workload's measured steps, run a second time in the same process and timed",
    ThroughputSource.METRIC_REGEX: "numbers the command printed (--metric-regex), averaged over the matches after "
                                   "the first",
    ThroughputSource.STEP_MARKS: "alloctune.step() marks in the program, over the steps after the warm-up, summed "
                                 "over its processes",
    ThroughputSource.STEP_CALLS: "the calls --step-on names, counted by alloctune's start-up hook over the steps "
                                 "after the warm-up, summed over its processes",
    ThroughputSource.OPTIMIZER_STEPS: "optimizer steps, counted by alloctune's start-up hook (no code change) over "
                                      "the steps after the warm-up, summed over its processes",
    ThroughputSource.WALL_TIME: "the whole run's wall time, start-up included (one run = one unit): no steps were "
                                "seen",
}


def auto_window_line(labels: list[str], ended: int, measured: int, held: bool = False) -> str:
    """summary.md's line on the confirmation trials that ended at their automatic window (`Measurement.auto_window`:
    the rule is runtime/stopping.py's, which docs/commands.md gives with its figures); `held`: every one of them ran
    to the step of its setting's replayed peak (`Measurement.held_to_step`)."""
    covers = ("each ran to the step in which the replay of its setting reached peak reserved, so their memory is "
              "confirmed for the steps they ran, the replayed peak's among them" if held else
              "their memory is confirmed for the steps they ran, not for the whole run")
    return (f"- Automatic window: the start-up hook ended {ended} of {measured} trials ({', '.join(labels)}) once "
            f"their steps after the warm-up had timed the rate well enough, every process at the same step: "
            f"{covers}.")


def skipped_words(skipped: Skipped) -> str:
    """Why a sweep skipped a setting (sweep.json's entry), in words: its decision said, or the settings rule's own
    text (and an older sweep.json's sentence) as it is."""
    if skipped.why is None:
        return skipped.reason
    return sentence(Reason.from_record(skipped.why, f"{SWEEP_FILE}: skipped {skipped.conf!r}"))
