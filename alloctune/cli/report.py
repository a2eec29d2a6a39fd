"""`alloctune report RESULTS`: decide again from recorded trials and rewrite the reports; measures nothing."""
from __future__ import annotations

import json
import shlex
import sys

from rich.text import Text

from ..errors import FolderBusy, printable
from .args import fraction

# The options' fields as this command's flags: a library message that names one shows the flag.
FLAGS = {"max_slowdown": "--max-slowdown"}


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
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from ..api.analyze import AnalyzeOptions, analyze
    from ..report.analysis import change_lines, choice_record
    from ..report.ranked import print_choice
    from ..results.folder import ResultsFolder, find_results, passed_by
    from .args import console as wide_console

    console = wide_console()
    options = AnalyzeOptions(max_slowdown=args.max_slowdown)
    decided = []
    empty: list[ResultsFolder] = []
    found = find_results(args.results, empty)
    for folder in empty:   # passed by, in a line each: the folders beside it are reported, and the status is theirs
        print(printable(passed_by(folder, "not reported")), file=sys.stderr)
    for folder in found:
        try:
            analysis = analyze(folder, options)
        except FolderBusy as busy:   # a sweep still running there writes these reports itself as it ends
            raise FolderBusy(f"{busy}: a sweep writes its reports itself as it ends; then `alloctune report "
                             f"{shlex.quote(str(folder.path))}` decides again (with --max-slowdown for another "
                             f"allowance)") from None
        # What the report changed, on standard error (the folder's own version named where a choice changed).
        swept_by = folder.info().alloctune_version if analysis.changes else ""
        for line in change_lines(analysis.changes, analysis.best_env, swept_by):
            print(printable(line), file=sys.stderr)
        if args.json:
            decided.append(analysis.to_json())
            continue
        console.print(Text(str(folder.path), style="bold"), soft_wrap=True)
        for choice in analysis.choices:
            print_choice(console, choice_record(choice))
    if args.json:
        print(json.dumps(decided, indent=2))
    return 0
