"""`alloctune report RESULTS`: decide again from recorded trials and rewrite the reports; measures nothing."""
from __future__ import annotations

import json
import shlex

from rich.text import Text

from ..errors import FolderBusy

from .args import fraction


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


def run(args) -> int:
    from ..sweeper.sweep import analyze
    from ..report.ranked import print_choice
    from ..results.folder import find_results
    from .args import console as wide_console

    console = wide_console()
    decided = []
    for folder in find_results(args.results):
        try:
            settings, choices = analyze(folder, args.max_slowdown)
        except FolderBusy as busy:   # a sweep still running there writes these reports itself as it ends
            raise FolderBusy(f"{busy}: a sweep writes its reports itself as it ends; then `alloctune report "
                             f"{shlex.quote(str(folder.path))}` decides again (with --max-slowdown for another allowance)") from None
        if args.json:
            decided.append(decisions(folder, choices))
            continue
        console.print(Text(str(folder.path), style="bold"), soft_wrap=True)
        for choice in choices:
            print_choice(console, settings, choice)
    if args.json:
        print(json.dumps(decided, indent=2))
    return 0
