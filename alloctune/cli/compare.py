"""`alloctune compare A [B ...]`: results side by side across folders and environments."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.text import Text

from ..decide.regression import DEFAULT_FACTOR
from ..report.layout import say
from .args import console, written


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1) such as {DEFAULT_FACTOR}, got {text!r}")
    return value


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare results across folders and environments (e.g. two torch versions)",
        description="Compare results folders (or the environments of one folder) against the first one: peak "
                    "reserved, reserved/allocated and throughput per setting, with marks for regressions, "
                    "improvements, new and fixed failures and incomparable rows. Writes compare.md and compare.png.")
    p.add_argument("folders", nargs="+", metavar="RESULTS",
                   help="results folders (or folders of them); the first environment is the baseline")
    p.add_argument("--factor", type=_factor, default=DEFAULT_FACTOR,
                   help=f"relative change beyond which memory or throughput counts as changed (default {DEFAULT_FACTOR})")
    p.add_argument("-o", "--output", metavar="DIR", default=".",
                   type=written("the folder of compare.md and compare.png"),
                   help="where to write compare.md and compare.png (default: the current folder)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the tables")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..report.compare import compare
    from ..report.compare_output import plot_comparison, print_comparison, write_compare_md
    from ..results.folder import find_results

    folders = [folder for path in args.folders for folder in find_results(path)]
    comparison = compare(folders, factor=args.factor)
    if args.json:
        print(json.dumps(comparison.to_json(), indent=2))
    else:
        print_comparison(comparison, console())
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    md = write_compare_md(comparison, out / "compare.md")
    png = plot_comparison(comparison, out / "compare.png")
    # Where the files went, said even when it is here: a bare 'compare.md' reads as a name, not a place.
    here = " (the current folder; -o DIR writes elsewhere)" if args.output == "." else ""
    say(console(stderr=args.json), Text(f"wrote {_shown(md)} and {_shown(png)}{here}"))
    return 0


def _shown(path: Path) -> str:
    return str(path) if path.parent != Path(".") else f"./{path}"
