"""What a decided results folder says about its decision (`decide/decision.py`), written: choice.json (each
reason as data and in words), summary.md, plot.png and, for a finished sweep, best.env. The sweeper decides and
calls this (`api/analyze.decide_folder`, behind `sweep()` and `alloctune report`).
"""
from __future__ import annotations

from ..decide.changed import ChoiceChange
from ..decide.choice import Choice
from ..decide.decision import FolderDecision
from ..decide.safety import target_torch
from ..files import write_file
from ..results.choices import ChoiceRecord, RunnerUp
from ..results.folder import ResultsFolder, SweepInfo
from ..results.names import BEST_FILE, PLOT_FILE
from ..settings.conf import conf_label
from ..units import figure
from .words import decision_line, precision_line, reason_lines, sentence


def write_folder(folder: ResultsFolder, info: SweepInfo, decision: FolderDecision) -> None:
    """Write choice.json, summary.md, plot.png and (for a finished sweep) best.env for `decision`: inside
    `folder.together()` (its caller's), so that they change together or not at all."""
    # matplotlib and rich load when a folder is written, not when the sweeper imports this module
    from .export import provenance, render, standing
    from .plot import plot_pareto
    from .summary import write_summary

    settings, choices = decision.settings, decision.choices
    records = [choice_record(c) for c in choices]
    folder.write_choice(records)
    write_summary(folder, info, settings, choices, decision.calibration)
    plot_pareto(settings, choices, folder.file(PLOT_FILE))
    best = next((c for c in standing(records) if c.conf is not None), None)   # what `export` takes
    # best.env is read as is (--env-file): none when nothing fits (summary.md says so), nor from an interrupted
    # sweep, as `export` refuses one without --allow-incomplete; a stale one would contradict choice.json.
    if best is not None and best.complete:
        write_file(folder.file(BEST_FILE), render(best, "env", provenance(folder, info, best)))
    else:
        folder.remove(BEST_FILE)


def choice_record(choice: Choice) -> ChoiceRecord:
    """The decision as choice.json keeps it: its figures, and each reason in words and as data."""
    best, base = choice.best, choice.baseline
    cmp = best.vs_default if best is not None else None
    return ChoiceRecord(
        workload=choice.workload, workload_hash=choice.workload_hash,
        env_id=choice.env_id, backend=choice.backend, budget_bytes=choice.budget_bytes,
        fits=best is not None, conf=best.conf if best else None, label=best.label if best else "nothing fits",
        baseline="", is_default=bool(best and best.is_default), simulated=choice.simulated,
        # A replay follows the torch it was simulated as, not the one the trace was recorded with.
        torch_version=target_torch(choice.env), env=choice.env, features=tuple(f.value for f in choice.features),
        decision=decision_line(choice), reasons=tuple(reason_lines(choice)),
        runners_up=tuple(RunnerUp(s.conf, sentence(why), why.record()) for s, why in choice.runners_up),
        decision_data=choice.decision.record(), reasons_data=tuple(r.record() for r in choice.reasons),
        precision=precision_line(choice),
        precision_data=choice.precision.record() if choice.precision is not None else None,
        peak_reserved_bytes=best.peak_reserved_bytes if best else None,
        memory_measure=best.memory_measure if best else None,
        memory_bytes=best.memory if best else None,
        device_peak_used_bytes=best.device_peak_used_bytes if best else None,
        baseline_memory_bytes=base.memory if base else None,
        peak_allocated_bytes=best.peak_allocated_bytes if best else None,
        reserved_ratio=best.reserved_ratio if best else None,
        num_alloc_retries=best.num_alloc_retries if best else None,
        baseline_state=base.state if base else None,
        baseline_peak_reserved_bytes=base.peak_reserved_bytes if base else None,
        baseline_reserved_ratio=base.reserved_ratio if base else None,
        throughput_median=best.throughput.median if best and best.throughput else None,
        baseline_throughput_median=base.throughput.median if base and base.throughput else None,
        throughput_unit=best.unit if best else None,
        throughput_ratio=choice.throughput_ratio,
        throughput_p_value=cmp.p_value if cmp else None,
        throughput_ratio_ci=(cmp.ci_low, cmp.ci_high) if cmp and cmp.ci_low is not None and cmp.ci_high is not None
        else None,
        paired_rounds=cmp.pairs if cmp else None,
        detectable_slowdown=choice.detectable, verdict=choice.verdict,
        max_slowdown=choice.max_slowdown, tie=choice.tie,
        repeats=max((len(s.trials) for s in (best, base) if s), default=0),
        complete=choice.complete, trials_recorded=choice.trials_recorded, trials_planned=choice.trials_planned,
        predictions={conf: p.to_json() for conf, p in choice.predictions.items()},
    )


def change_lines(changes: list[ChoiceChange], env: tuple[list[str], list[str]], swept_by: str) -> list[str]:
    """What `alloctune report` changed in a folder, one line each: a group's choice, with what the new decision was
    taken from (or that the rules are this alloctune's), and best.env's settings (`env`: before and after)."""
    lines = []
    for c in changes:
        was, now = ("nothing fits" if conf is None else conf_label(conf) for conf in (c.before, c.after))
        inputs = ", ".join(f"{name.replace('_', ' ')} {figure(b, 'g')} instead of {figure(a, 'g')}"
                           for name, (a, b) in c.inputs_changed().items())
        lines.append(f"report: the choice for {c.env_id} ({c.backend}) changed from {was} to {now}, decided again "
                     + (f"from {inputs}" if inputs else "from the same trials and parameters by this alloctune's "
                        f"rules (the folder was swept by {f'alloctune {swept_by}' if swept_by else 'an unnamed version'})"))
    if env[0] != env[1]:
        was, now = ("; ".join(settings) or "nothing" for settings in env)
        lines.append(f"report: {BEST_FILE} now sets {now} (it set {was})")
    return lines
