"""The command line: one module per subcommand, each only parsing arguments and calling the library."""
from __future__ import annotations

import argparse
import sys


def gpu_list(text: str) -> list[int]:
    """--gpus: distinct GPU indices, '0,1'."""
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0 or 0,1, got {text!r}") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"expected distinct GPU indices >= 0 such as 0,1, got {text!r}")
    return gpus


def fraction(text: str) -> float:
    """--max-slowdown: a fraction in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1) such as 0.02, got {text!r}")
    return value


def seconds(text: str) -> float:
    """--timeout: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def console(stderr: bool = False):
    """A rich console; when the output is not a terminal (a log, CI), wide enough that tables keep their rows on
    one line instead of folding into 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 200)
