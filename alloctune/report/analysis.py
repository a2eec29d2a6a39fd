"""Decide from a results folder's recorded trials and write what the folder says about them: choice.json (each
reason as a sentence and as data), summary.md, plot.png and, for a finished sweep, best.env.

A sweep ends with `analyze`; `alloctune report` (and `alloctune.analyze`) calls it again, e.g. with another
--max-slowdown, without measuring anything.
"""
from __future__ import annotations

import os
from dataclasses import replace

from ..decide.choice import Choice, choose
from ..decide.planned import planned_trials, recorded_trials
from ..decide.precision import precision
from ..decide.safety import target_torch
from ..decide.summary import SettingResult, summarize_settings
from ..files import write_file
from ..results.folder import ChoiceRecord, ResultsFolder, RunnerUp, results_folder
from ..results.records import check_max_slowdown
from .words import decision_line, precision_line, reason_lines, sentence


def analyze(folder: ResultsFolder | str | os.PathLike,
            max_slowdown: float | None = None) -> tuple[list[SettingResult], list[Choice]]:
    """Decide from the recorded trials alone and write choice.json, summary.md, plot.png and (for a finished
    sweep) best.env; returns the settings and choices, as `sweep()`'s outcome holds them. `folder`: a results
    folder (as `sweep()` returns it) or its path. `max_slowdown`: instead of the sweep's own (sweep.json keeps what
    was asked; the override lives with the decision, in choice.json)."""
    folder = results_folder(folder)
    if max_slowdown is not None:
        check_max_slowdown(max_slowdown)
    with folder.lock():  # not while a sweep writes the folder
        return _analyze(folder, max_slowdown)


def _analyze(folder: ResultsFolder, max_slowdown: float | None) -> tuple[list[SettingResult], list[Choice]]:
    # matplotlib and rich load when a folder is written, not when the sweeper imports this module
    from .export import provenance, render, standing
    from .plot import plot_pareto
    from .summary import write_summary

    info = folder.info()
    max_slowdown = info.max_slowdown if max_slowdown is None else max_slowdown
    trials = folder.trials()
    settings = summarize_settings(trials, max_slowdown)
    choices = []
    for c in choose(settings, max_slowdown):
        c = replace(c, trials_recorded=recorded_trials(trials, c.env_id, c.backend),
                    trials_planned=planned_trials(info, c.env_id, c.backend), finished=info.finished is not False)
        choices.append(replace(c, precision=precision(c, auto=info.auto_repeats, max_repeats=info.repeats)))
    records = [choice_record(c) for c in choices]
    folder.write_choice(records)
    write_summary(folder, info, settings, choices)
    plot_pareto(settings, choices, folder.path / "plot.png")
    best = next((c for c in standing(records) if c.conf is not None), None)   # what `export` takes
    # best.env is read as is (--env-file): none when nothing fits (summary.md says so), nor from an interrupted
    # sweep, as `export` refuses one without --allow-incomplete; a stale one would contradict choice.json.
    if best is not None and best.complete:
        write_file(folder.path / "best.env", render(best, "env", provenance(folder, info, best)))
    else:
        (folder.path / "best.env").unlink(missing_ok=True)
    return settings, choices


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
    )
