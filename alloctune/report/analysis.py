"""What a decided results folder says about its decision (`decide/decision.py`), written: choice.json (each
decision's record, its reasons as data and in words), summary.md, plot.png and, for a finished sweep, best.env. The
sweeper decides and calls this (`api/analyze.decide_folder`, behind `sweep()` and `alloctune report`).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..decide.changed import ChoiceChange
from ..decide.choice import Choice
from ..decide.decision import FolderDecision
from ..decide.record import decision_record
from ..decide.speed import PREDICTION_ERROR
from ..decide.standing import standing
from ..files import write_file
from ..results.choices import ChoiceRecord
from ..results.folder import ResultsFolder, SweepInfo
from ..results.names import BEST_FILE, PLOT_FILE
from ..results.upgrade import schema1
from ..results.vocabulary import BASIS, SETTING, SIMULATED_TORCH, Basis, setting_name
from ..settings.conf import conf_label
from ..sim.target import simulated_torch
from ..units import figure
from .words import worded


def write_folder(folder: ResultsFolder, info: SweepInfo, decision: FolderDecision) -> None:
    """Write choice.json, summary.md, plot.png and (for a finished sweep) best.env for `decision`: inside
    `folder.together()` (its caller's), so that they change together or not at all."""
    # matplotlib and rich load when a folder is written, not when the sweeper imports this module
    from .export import provenance, render
    from .plot import plot_pareto
    from .summary import write_summary

    records = [choice_record(c) for c in decision.choices]
    folder.write_choice(records)
    write_summary(folder, info, decision.settings, records, decision.calibration)
    plot_pareto(records, folder.file(PLOT_FILE))
    best = next((c for c in standing(records) if c.conf is not None), None)   # what `export` takes
    # best.env is read as is (--env-file): none when nothing fits (summary.md says so), nor from an interrupted
    # sweep, as `export` refuses one without --allow-incomplete; a stale one would contradict choice.json.
    if best is not None and best.complete:
        write_file(folder.file(BEST_FILE), render(best, "env", provenance(folder, info, best)))
    else:
        folder.remove(BEST_FILE)


def choice_record(choice: Choice) -> ChoiceRecord:
    """The decision as choice.json keeps it and the reports show it: decide's record (`decide/record.py`), its
    reasons said in words."""
    return worded(decision_record(choice))


def choice_json(choice: Choice) -> dict[str, Any]:
    """The decision as `--json` prints it (sweep, report): choice.json's record, and beside it the keys schema 1
    had, with their values (`results/upgrade.schema1`), for the programs that read those; its settings named and
    their figures' basis given as every command's --json gives them (`named`), schema 1's `baseline` too (the
    default, "" in the file)."""
    record = choice_record(choice)
    return dict(schema1(record), **named(record), baseline=setting_name(""))


def named(record: ChoiceRecord) -> dict[str, Any]:
    """`record` in the vocabulary of every command's --json (results/vocabulary.py): each setting by `setting_name`
    (choice.json keeps the allocator's own value, "" for the default), each setting's figures with their `basis`
    (replayed in a simulated decision, with the torch the replays followed; else measured), and each prediction
    marked predicted, with how far predictions were from measurements where both were made."""
    data = record.to_json()
    basis = Basis.of_trials(record.simulated)
    if record.conf is not None:
        data[SETTING] = setting_name(record.conf)
    data["settings"] = [dict(s, **{SETTING: setting_name(s[SETTING]), BASIS: basis.value}) for s in data["settings"]]
    data["runners_up"] = [dict(r, **{SETTING: setting_name(r[SETTING])}) for r in data["runners_up"]]
    error = asdict(PREDICTION_ERROR)
    data["predictions"] = {setting_name(conf): dict(p, **{BASIS: Basis.PREDICTED.value, "measured_error": error})
                           for conf, p in data["predictions"].items()}
    if record.simulated:
        data[SIMULATED_TORCH] = simulated_torch(record.simulated_as)
    return data


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
