"""The command line: one module per subcommand, each only parsing arguments and calling the library."""
from __future__ import annotations

import sys


def console(stderr: bool = False):
    """A rich console; when the output is not a terminal (a log, CI), wide enough that tables keep their rows on
    one line instead of folding into 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 200)
