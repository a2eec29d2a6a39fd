"""`alloctune compare A [B ...]`: results side by side across folders and environments."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.text import Text

from ..api.compare import CompareOptions, compare
from ..decide.regression import DEFAULT_FACTOR
from ..report.layout import say
from .args import console, written

# The options' fields as this command's flags: a library message that names one shows the flag.
FLAGS = {"factor": "--factor", "output": "--output", "force": "--force"}


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
                    "improvements, new and fixed failures and incomparable rows. With -o DIR, also writes "
                    "compare.md and compare.png there.")
    p.add_argument("folders", nargs="+", metavar="RESULTS",
                   help="results folders (or folders of them); the first environment is the baseline")
    p.add_argument("--factor", type=_factor, default=CompareOptions.factor,
                   help=f"relative change beyond which memory or throughput counts as changed (default {DEFAULT_FACTOR})")
    p.add_argument("-o", "--output", metavar="DIR", default=CompareOptions.output,
                   type=written("the folder of compare.md and compare.png"),
                   help="write compare.md and compare.png into DIR (default: print the table, write nothing)")
    p.add_argument("--force", action="store_true",
                   help="compare folders of different workloads (refused otherwise: their rows never meet)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the tables")
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from ..report.compare_output import print_comparison

    compared = compare(args.folders, CompareOptions(factor=args.factor, output=args.output, force=args.force))
    if args.json:
        print(json.dumps(compared.comparison.to_json(), indent=2))
    else:
        print_comparison(compared.comparison, console())
    if compared.markdown is not None:
        # Where the files went, said even when it is here: a bare 'compare.md' reads as a name, not a place.
        say(console(stderr=args.json), Text(f"wrote {_shown(compared.markdown)} and {_shown(compared.plot)}"))
    return 0


def _shown(path: Path | None) -> str:
    return str(path) if path is None or path.parent != Path(".") else f"./{path}"
