"""`alloctune` entry point: builds the parser from the subcommand modules and turns errors into exit codes."""
from __future__ import annotations

import _thread
import argparse
import codecs
import importlib
import io
import os
import signal
import sys
import threading
import warnings
from types import FrameType
from typing import Any, Callable, NoReturn

from .. import __version__
from ..errors import AlloctuneError, UsageError, bounded, printable
from .args import flagged

# Each module defines register(subparsers), which adds its parser and sets `func` to a run(args) -> int.
SUBCOMMANDS = ("sweep", "record", "calibrate", "replay", "search", "export", "compare", "report", "diagnose", "fit",
               "fleet")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its usage errors alloctune's own (`UsageError`: one line, exit 2, as main() says every
    mistake) instead of the usage and `alloctune fit: error: ...`; subcommands' parsers are of the same class.
    --help and --version print as argparse prints them. Options are taken spelled in full only: an abbreviation
    would pass into what a sweep keeps and suggests (its command line, cli/sweep._on_gpu), which reads options by
    their names, and an option added later would make it ambiguous."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        raise _usage(message, self.prog)

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but arguments that no option takes are named with the subcommand they were given to."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(parsed, "command", None)
            raise _usage(f"unrecognized arguments: {' '.join(extra)}", f"{self.prog} {command}" if command else self.prog)
        return parsed


def _usage(message: str, prog: str) -> UsageError:
    return UsageError(f"{message} (see {prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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


class _Signals:
    """While a command runs (in the main thread: only it may set handlers), SIGTERM raises `Terminated` wherever
    the command then is. Python swallows an exception raised inside a finalizer or a weakref callback (an import's
    module lock, an object's `__del__`), so a signal landing there would be lost and the command would run on and
    exit 0: an interruption swallowed so (`sys.unraisablehook` sees it) is delivered again a moment later, to land in
    the code that runs then; one lost where nothing reports it still leaves `terminated` set, for the exit status."""

    def __init__(self) -> None:
        self.terminated = False
        self._handler: Any = None
        self._hook: Callable[[Any], object] | None = None

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            self._handler = signal.signal(signal.SIGTERM, self._terminate)
            self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        if self._hook is not None:   # the hook first: setting a handler runs one pending, which may raise
            sys.unraisablehook, self._hook = self._hook, None
            signal.signal(signal.SIGTERM, self._handler)

    def _terminate(self, signum: int, frame: FrameType | None) -> None:
        self.terminated = True
        raise Terminated()

    def _unraisable(self, unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            # Raised from here it would be swallowed again (what a hook raises is only printed): delivered again
            # a moment later instead, as if the signal came then, into the code the command runs by then.
            signum = signal.SIGTERM if issubclass(unraisable.exc_type, Terminated) else signal.SIGINT
            again = threading.Timer(0.01, _thread.interrupt_main, (signum,))
            again.daemon = True
            again.start()
        elif self._hook is not None:
            self._hook(unraisable)


def _warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(printable(bounded(f"alloctune: warning: {message}")), file=sys.stderr)


def _stand_in_for_closed_streams() -> None:
    """A standard stream the caller closed (`>&-`, `2>&-`, `<&-`) gets a stand-in, so that no file alloctune opens
    takes its number (print() would then write into that file) and nothing traces back. Standard input reads as
    empty; standard error goes nowhere (the exit status still says how it went); standard output becomes a pipe
    that nobody reads, so writing a command's output fails as it does into a reader that left (exit 141, quietly),
    while a command that prints nothing there (`export -o FILE`) still works."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        if fd == 1:
            read_end, write_end = os.pipe()
            os.dup2(write_end, 1)
            for end in (read_end, write_end):
                if end != 1:
                    os.close(end)
        else:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        stream = io.TextIOWrapper(io.FileIO(fd, "r" if fd == 0 else "w", closefd=False), encoding="utf-8",
                                  errors="surrogateescape" if fd == 0 else _OUTPUT_ERRORS, line_buffering=fd == 2)
        setattr(sys, ("stdin", "stdout", "stderr")[fd], stream)


# The characters beyond ASCII that alloctune's own words and tables print, as a stream whose encoding lacks them
# shows them (PYTHONIOENCODING=ascii, LC_ALL=C): one character for one where a table's columns depend on it.
_STAND_INS = {"·": "-", "×": "x", "÷": "/", "±": "~", "—": "-", "≥": ">=", "−": "-", "✗": "X", "✓": "+", "†": "*"}
_OUTPUT_ERRORS = "alloctune-output"


def _unencodable(error: UnicodeError) -> tuple[bytes, int]:
    """What standard output and error write for what their encoding cannot: a glyph's ASCII stand-in; any other
    text (a path, a GPU's name) as the bytes it came from, as the file system has a path: the UTF-8 bytes of a
    character, the original byte of one that was not UTF-8 (surrogateescape's). So no output dies on a character,
    and a path printed is still the path."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = bytearray()
    for char in error.object[error.start:error.end]:
        if "\udc80" <= char <= "\udcff":
            out.append(ord(char) - 0xDC00)
        elif char in _STAND_INS:
            out += _STAND_INS[char].encode("ascii")
        else:
            out += char.encode("utf-8", "surrogatepass")
    return bytes(out), error.end


codecs.register_error(_OUTPUT_ERRORS, _unencodable)


def _writable_output() -> None:
    """Standard output and error never fail on a character (see `_unencodable`); their encoding stays the
    caller's."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=_OUTPUT_ERRORS)


def _reader_left() -> int:
    """The reader of our output left (`alloctune replay T | head -n 3`): stop without a word and with 128 + SIGPIPE
    = 141, the status coreutils tools (cat, seq, sort) have then, as they die of SIGPIPE; so a pipeline under
    `set -o pipefail` sees a cut output as cut, and nothing claims it was whole. What is still buffered goes to
    /dev/null: the interpreter's last flush of stdout would otherwise fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _say(text: str) -> None:
    """A last line on standard error, its long words cut and its controls shown (errors.bounded, printable); a
    reader of it that left is no reason for a traceback."""
    try:
        print(printable(bounded(text)), file=sys.stderr)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    _stand_in_for_closed_streams()
    _writable_output()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            sys.stdout.flush()
            return 2
    except SystemExit:   # --help, --version or a usage error, printed: the reader may have left meanwhile
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            return _reader_left()
        raise
    except BrokenPipeError:
        return _reader_left()
    except UsageError as exc:
        _say(f"alloctune: error: {exc}")
        return exc.exit_code
    signals = _Signals()
    try:
        with signals, warnings.catch_warnings():  # a warning is one line, without the source line Python adds
            warnings.showwarning = _warning
            code = int(args.func(args) or 0)
            sys.stdout.flush()   # here, so that a reader who left is handled below, not at interpreter exit
        if signals.terminated:   # its Terminated was lost where nothing reported it, and the work went on to its end
            _say("alloctune: terminated as it finished; what it printed is whole")
            return 128 + signal.SIGTERM
        return code
    except BrokenPipeError:
        return _reader_left()
    except AlloctuneError as exc:
        # Options named as this subcommand's flags (its `flags` table: field -> flag).
        _say(f"alloctune: error: {flagged(exc, getattr(args, 'flags', {}))}")
        return exc.exit_code
    except OSError as exc:  # a file we were told to read or write, or a command to run, that is not there
        _say(f"alloctune: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        return 2
    except KeyboardInterrupt as exc:
        # What the interrupted command leaves behind, as it says it (`interrupted` on args; sweep updates it once
        # every file is written).
        how = "terminated" if isinstance(exc, Terminated) else "interrupted"
        # Only a sweep keeps what it finished (its trials file); every other command answers whole or not at all.
        left = getattr(args, "interrupted", "")
        _say(f"alloctune: {how}; {left}" if left else f"alloctune: {how} before it finished")
        return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
