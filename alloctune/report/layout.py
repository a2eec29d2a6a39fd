"""How text meets the terminal, one rule for every command.

- Width: COLUMNS when it is set, else the terminal's, else (a log, a pipe, CI) `NOT_A_TERMINAL` columns.
- Prose wraps between words only: a setting, a path or a number never breaks, and a number stays with its unit
  ('26.87 GiB'); a word longer than the line stands whole on a line of its own.
- A command to copy is printed whole after its label when it fits, else on lines of its own, broken only between
  shell words with a trailing backslash: pasted into a shell it runs as it is.

Tables follow the same rule (report/tables.py): a column is never narrower than its longest word, and settings too
long for the table are folded between their keys (never inside a value), else numbered and printed whole below it.
"""
from __future__ import annotations

import os
import re
import shlex
import textwrap
from typing import IO, Any, Sequence

NOT_A_TERMINAL = 80   # columns when the output is not a terminal and COLUMNS is unset: what a log or a pager shows
INDENT = "  "

# One word to the wrapper: a number and the unit after it ('26.87 GiB', '238,631 tokens/s'), and a test's figure
# ('p = 0.046').
_UNBROKEN = re.compile(r"(?<=\d) (?=(?:B|KiB|MiB|GiB|TiB|[A-Za-z]+/s)\b)|(?<=\bp) (?== \d)|(?<=\bp =) (?=\d)")
_GLUE = "\u00a0"   # textwrap never breaks at a no-break space


def unbreakable_words(text: str) -> list[str]:
    """The words of `text` as the wrapper keeps them: a figure with its unit, 'p = 0.046', whole."""
    return [word.replace(_GLUE, " ") for word in re.split(r"[ \t\n\r\f\v]+", _UNBROKEN.sub(_GLUE, text)) if word]


def output_width(stream: IO[Any]) -> int:
    """The columns output to `stream` may use."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):   # no file descriptor (a test's StringIO), or not a terminal
        pass
    return NOT_A_TERMINAL


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """`text` as lines of at most `width` columns, broken between words only; `first` starts the first line and
    `rest` (default: as many spaces) the others."""
    rest = " " * len(first) if rest is None else rest
    lines = textwrap.wrap(_UNBROKEN.sub(_GLUE, text), width, initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False)
    return [line.replace(_GLUE, " ") for line in lines] or [first.rstrip()]


def say(console: Any, text: Any, rest: str | None = None, style: str = "") -> None:
    """Print `text` (plain: never read as rich markup, as it may hold a user's path such as 'o[/]ut'; or a rich
    Text, for styles) on `console`, wrapped as `wrap` does, its styles kept; the lines
    after the first start with `rest` (default: the first line's indent and two spaces more)."""
    from rich.text import Text

    text = Text(text, style=style) if isinstance(text, str) else text
    plain = text.plain
    first = plain[:len(plain) - len(plain.lstrip(" "))]
    rest = first + INDENT if rest is None else rest
    start = 0
    for n, line in enumerate(wrap(plain[len(first):], console.width, first, rest)):
        body = line[len(first if n == 0 else rest):]
        found = plain.find(body, start)   # the same characters in order, unless whitespace other than spaces
        if found < 0:
            console.print(Text(line, style=style), soft_wrap=True)
            continue
        console.print(Text(first if n == 0 else rest) + text[found:found + len(body)], soft_wrap=True)
        start = found + len(body)


def command(label: str, words: Sequence[str], width: int) -> list[str]:
    """`label` and the command `words`: on one line when it fits, else the label alone and the command below it,
    indented, broken between words with a trailing backslash (an option stays with its value)."""
    whole = shlex.join(words)
    if len(label) + 1 + len(whole) <= width:
        return [f"{label} {whole}"]
    lines, line = [label], ""
    for chunk in _chunks(words):
        if line and len(line) + 1 + len(chunk) + 2 > width:   # + ' \'
            lines.append(line + " \\")
            line = ""
        line = f"{line} {chunk}" if line else (INDENT if len(lines) == 1 else INDENT * 2) + chunk
    return lines + [line]


def _chunks(words: Sequence[str]) -> list[str]:
    """The quoted words, an option joined to the value after it."""
    quoted = [shlex.quote(w) for w in words]
    chunks: list[str] = []
    for i, word in enumerate(quoted):
        if chunks and chunks[-1].startswith("-") and " " not in chunks[-1] and not word.startswith("-") \
                and words[i - 1] != "--":
            chunks[-1] += " " + word
        else:
            chunks.append(word)
    return chunks
