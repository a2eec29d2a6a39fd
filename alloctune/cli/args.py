"""Argument types and helpers shared by the subcommands: GPU lists, counts, fractions, library messages as flags,
the console, a replay's device options."""
from __future__ import annotations

import argparse
import errno
import math
import os
import sys
from typing import TYPE_CHECKING, cast

from ..errors import OptionText, printable, python_name
from ..units import MAX_INT, MAX_INT_TEXT
from ..workload.spec import MAX_TIMEOUT_S

if TYPE_CHECKING:
    from rich.console import RenderHook


def gpu_list(text: str) -> list[int]:
    """--gpus: distinct GPU indices, '0,1'."""
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0 or 0,1, got {text!r}") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"expected distinct GPU indices >= 0 such as 0,1, got {text!r}")
    return gpus


def positive_int(text: str, least: int = 1) -> int:
    """--jobs, --finalists and the like: a whole number >= `least`, of 64 bits (a results file holds no larger)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_INT)) or not least <= int(text) <= MAX_INT:
        raise argparse.ArgumentTypeError(f"expected a whole number from {least} to {MAX_INT_TEXT}, got {text!r}")
    return int(text)


def whole_int(text: str) -> int:
    """A whole number >= 0 (--extra-recordings: none is a choice)."""
    return positive_int(text, least=0)


def _number(valid, expected: str):
    """An argparse type: a finite float for which `valid` holds, else a message saying what was expected."""
    def parse(text: str) -> float:
        try:
            value: float | None = float(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not valid(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


def written(what: str, stdout: bool = False):
    """An argparse type for a path alloctune writes (`what` it names, for the message): never empty (that would be
    the current folder), and '-' standard output where `stdout`, else refused: never a file or folder named '-'."""
    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"an empty path cannot be {what}: give a path")
        if text == "-" and not stdout:
            raise argparse.ArgumentTypeError(f"'-' (standard output) cannot be {what}: give a path")
        return text
    return parse


fraction = _number(lambda v: 0 <= v < 1, "a fraction in [0, 1) such as 0.02")   # --max-slowdown
seconds = _number(lambda v: 0 < v <= MAX_TIMEOUT_S,                             # --timeout
                  f"a positive number of seconds, at most {MAX_TIMEOUT_S:.0f} (a week)")


def flagged(message: object, flags: dict[str, str]) -> str:
    """A library message as a CLI user reads it: each option an `OptionText` names, as the subcommand's flag
    (`flags`: field -> flag): `--max-repeats`, `--fresh` for fresh=True, `--backend sim` for backend=sim. An
    exception's message is its one argument."""
    if isinstance(message, BaseException) and len(message.args) == 1:
        message = message.args[0]
    if not isinstance(message, OptionText):
        return str(message)

    def flag(name: str, value: str | None) -> str:
        if name not in flags:
            return python_name(name, value)
        return flags[name] if value in (None, "True") else f"{flags[name]} {value}"

    return message.render(flag)


def console(stderr: bool = False):
    """A rich console for standard output (or error), as wide as the one width rule says (report/layout.py). Nothing
    it prints is read as rich markup or emoji codes (a folder may be named 'o[/]ut', a trace '[red]b.xz'): styles
    come from rich Text alone."""
    from rich.console import Console

    from ..report.layout import output_width

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 here; main() handles a reader that left (`| head`) once, for print() as well.
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    shown = PipeConsole(stderr=stderr, width=output_width(sys.stderr if stderr else sys.stdout), markup=False,
                        emoji=False)
    shown.push_render_hook(cast("RenderHook", _Printable()))   # rich loads with the console, not before
    return shown


class _Printable:
    """A rich RenderHook: what any renderable prints (a table's cells, a path, a trace's metadata) passes through
    `errors.printable`; rich's own styles and cursor controls stay as they are."""

    def process_renderables(self, renderables: list) -> list:
        return [_PrintableText(r) for r in renderables]


class _PrintableText:
    def __init__(self, renderable) -> None:
        self.renderable = renderable

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        for segment in console.render(self.renderable, options):
            yield segment if segment.control else Segment(printable(segment.text), segment.style)


def add_replay_limits(p, budget: str) -> None:
    """The options of a replay's device and budget (replay, search: api/inputs.py reads them); `budget` ends
    --budget's help."""
    p.add_argument("--device-memory", metavar="SIZE",
                   help="device memory, e.g. 24GiB or 143771MiB (default: the recording GPU's, else an H200's)")
    p.add_argument("--budget", metavar="SIZE",
                   help="memory limit as a size (24GiB) or a fraction of the device (0.5)" + budget)
    p.add_argument("--overhead", metavar="SIZE",
                   help="device memory held outside the allocator (CUDA context, libraries); default: what the "
                        "trace recorded, else 1GiB")
    add_device(p)


def add_dry_run(p, what: str) -> None:
    """--dry-run (`what` it does for this command) and --arch, the card it stands for: record's, fit's, sweep's."""
    p.add_argument("--dry-run", action="store_true", help=what)
    p.add_argument("--arch", metavar="CARD",
                   help="with --dry-run: the GPU it stands for, a card (h100, h200, a100) or an architecture "
                        "(sm90, sm80); what the card's kernels add comes from its row of the table (default: h100)")


def add_device(p) -> None:
    """--device: which device's trace a snapshot of several GPUs gives (every command that loads traces:
    api/inputs.loaded)."""
    p.add_argument("--device", type=int, metavar="N", help="which device's trace, when a snapshot has several")
