"""`alloctune report RESULTS`: decide again from recorded trials and rewrite the reports; measures nothing."""
from __future__ import annotations

import json
import shlex
import sys
from typing import TYPE_CHECKING

from rich.text import Text

from ..errors import FolderBusy, ResultsError, printable
from ..results.folder import ChoiceRecord, ResultsFolder
from ..results.names import BEST_FILE

from .args import fraction

if TYPE_CHECKING:
    from ..decide.choice import Choice
    from ..decide.summary import SettingResult


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="re-decide from a results folder's trials and rewrite summary.md, plot.png, best.env",
        description="Read the trials a sweep recorded and run the choice again (for instance with another "
                    "--max-slowdown), rewriting choice.json, summary.md, plot.png and best.env (an interrupted "
                    "sweep gets no best.env: see export --allow-incomplete). Nothing is measured.")
    p.add_argument("results", help="a results folder, or a folder of them")
    p.add_argument("--max-slowdown", type=fraction,
                   help="reject settings significantly slower than the default by more than this fraction "
                        "(default: the value the sweep used)")
    p.add_argument("--json", action="store_true",
                   help="print each folder's decisions (as choice.json holds them) as JSON instead of the tables")
    p.set_defaults(func=run)


def decisions(folder, choices) -> dict:
    """A results folder's decisions as `--json` prints them (report, sweep): as choice.json holds them."""
    from ..report.analysis import choice_record

    return {"folder": str(folder.path), "choices": [choice_record(c).to_json() for c in choices]}


def _held(folder: ResultsFolder) -> list[ChoiceRecord]:
    """With the writer lock held: the decision a folder holds before a report replaces it: none where it has none,
    or one that cannot be read (the report rewrites it)."""
    try:
        return folder.choices() if folder.has_choice() else []
    except ResultsError:
        return []


def _env_settings(folder: ResultsFolder) -> list[str]:
    """best.env's settings: its lines but the comments (which name the folder and the alloctune that wrote it)."""
    try:
        text = (folder.path / BEST_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):   # none (nothing fitted, an interrupted sweep), or not readable
        text = ""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _changed(folder: ResultsFolder, held: list[ChoiceRecord], env: list[str], choices) -> dict:
    """What the report changed against the choice the folder `held` and best.env's settings `env`: said on stderr,
    returned for --json. A folder that held no choice had nothing to change."""
    from ..decide.changed import choice_changes
    from ..report.analysis import change_lines, choice_record

    changes = choice_changes(held, [choice_record(c) for c in choices])
    envs = (env, _env_settings(folder) if held else env)
    for line in change_lines(changes, envs, folder.info().alloctune_version if changes else ""):
        print(printable(line), file=sys.stderr)
    return {"changed": [c.to_json() for c in changes],
            "best_env_changed": {"before": envs[0], "after": envs[1]} if envs[0] != envs[1] else None}


def _decide_again(folder: ResultsFolder,
                  max_slowdown: float | None) -> tuple[list[SettingResult], list[Choice], dict]:
    """`analyze` again, and what that changed: the folder's decision and best.env read before it under the same
    writer lock (which `analyze` re-enters on this object), so no sweep or report writes the folder in between."""
    from ..sweeper.sweep import analyze

    with folder.lock():
        folder.settle()   # a batch a killed writer committed is in place before what the folder held is read
        held, env = _held(folder), _env_settings(folder)
        settings, choices = analyze(folder, max_slowdown)
        return settings, choices, _changed(folder, held, env, choices)


def run(args) -> int:
    from ..report.ranked import print_choice
    from ..results.folder import find_results
    from .args import console as wide_console

    console = wide_console()
    decided = []
    for folder in find_results(args.results):
        try:
            settings, choices, changed = _decide_again(folder, args.max_slowdown)
        except FolderBusy as busy:   # a sweep still running there writes these reports itself as it ends
            raise FolderBusy(f"{busy}: a sweep writes its reports itself as it ends; then `alloctune report "
                             f"{shlex.quote(str(folder.path))}` decides again (with --max-slowdown for another allowance)") from None
        if args.json:
            decided.append(dict(decisions(folder, choices), **changed))
            continue
        console.print(Text(str(folder.path), style="bold"), soft_wrap=True)
        for choice in choices:
            print_choice(console, settings, choice)
    if args.json:
        print(json.dumps(decided, indent=2))
    return 0
