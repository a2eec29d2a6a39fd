"""`alloctune` entry point: builds the parser from the subcommand modules and turns errors into exit codes."""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import warnings
from types import FrameType

from .. import __version__
from ..errors import AlloctuneError
from .args import flagged

# Each module defines register(subparsers), which adds its parser and sets `func` to a run(args) -> int.
SUBCOMMANDS = ("sweep", "record", "replay", "search", "export", "compare", "report", "diagnose")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alloctune",
        description="Find the best PYTORCH_CUDA_ALLOC_CONF for a GPU workload, prove it with measurements, "
                    "and export it as an env file.")
    parser.add_argument("--version", action="version", version=f"alloctune {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__package__}.{name}").register(subparsers)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`, a batch system): unwinds like Ctrl-C, so children are stopped and temporary
    folders removed on the way out."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def _warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"alloctune: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        with warnings.catch_warnings():  # a warning is one line, without the source line Python adds
            warnings.showwarning = _warning
            code = int(args.func(args) or 0)
            sys.stdout.flush()   # here, so that a reader who left is handled below, not at interpreter exit
            return code
    except BrokenPipeError:
        # The reader of our output left (`alloctune replay T | head -n 3`): stop without a word and with
        # 128 + SIGPIPE = 141, the status coreutils tools (cat, seq, sort) have then, as they die of SIGPIPE; so a
        # pipeline under `set -o pipefail` sees a cut output as cut, and nothing claims it was whole. What is still
        # buffered goes to /dev/null: the interpreter's last flush of stdout would otherwise fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except AlloctuneError as exc:
        # Options named as this subcommand's flags (its `flags` table: field -> flag).
        print(f"alloctune: error: {flagged(exc, getattr(args, 'flags', {}))}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a file we were told to read or write, or a command to run, that is not there
        print(f"alloctune: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # What the interrupted command leaves behind, as it says it (`interrupted` on args; sweep updates it once
        # every file is written).
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        left = getattr(args, "interrupted", "")
        print(f"alloctune: {how}" + (f"; {left}" if left else ""), file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
