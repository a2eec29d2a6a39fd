"""One error hierarchy for everything the user can get wrong; `cli.main` catches it once. And `shown`, the one way
an error message shows a value taken from the user's data.

Messages that name options (a `sweep()` option, an `export_results()` parameter...) are `OptionText`: a Python
caller reads the option's name, a CLI user its flag (each subcommand maps names to its flags)."""
from __future__ import annotations

import re
import reprlib
from string import Formatter
from typing import Any, Callable

# How a front end names an option: (name, the value it is set to in the message or None) -> text.
Naming = Callable[[str, "str | None"], str]
_CONVERSIONS: dict[str, Callable[[Any], str]] = {"r": repr, "s": str, "a": ascii}


class OptionText(str):
    """A message whose template names options as `{max_repeats}`, or `{fresh=True}` for an option set so; every
    other `{name}` (with its conversion and format spec) is one of `values`, so that user text in a value is never
    read as a placeholder. As a str it names options as Python callers write them (`max_repeats`, `fresh=True`);
    `render` names them another way, e.g. the CLI by its flags (`--max-repeats`, `--fresh`)."""

    template: str
    values: dict[str, Any]

    def __new__(cls, template: str, **values: Any) -> OptionText:
        text = super().__new__(cls, _fill(template, values, python_name))
        text.template, text.values = template, values
        return text

    def render(self, naming: Naming) -> str:
        return _fill(self.template, self.values, naming)


def python_name(name: str, value: str | None) -> str:
    """An option as Python callers write it."""
    return name if value is None else f"{name}={value}"


def options_apply(fields: list[str]) -> str:
    """The start of a template that refuses the options given (`fields`, at least one) where they do not apply:
    '{preset} applies', '{preset} and {trace} apply', '{a}, {b} and {c} apply'."""
    named = ["{%s}" % field for field in fields]
    return (", ".join(named[:-1]) + " and " if len(named) > 1 else "") + named[-1] + (
        " apply" if len(named) > 1 else " applies")


def _fill(template: str, values: dict[str, Any], naming: Naming) -> str:
    out = []
    for literal, name, spec, conversion in Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if name in values:
            value = values[name]
            if conversion:
                value = _CONVERSIONS[conversion](value)
            out.append(format(value, spec or ""))
        else:
            option, _, setting = name.partition("=")
            out.append(naming(option, setting or None))
    return "".join(out)


class AlloctuneError(Exception):
    """Base class: the message is shown to the user as is, and the CLI exits with `exit_code`."""

    exit_code = 2


class CommandFailed(AlloctuneError):
    """The user's own command failed (a non-zero exit, killed at its time limit) where alloctune needed its run whole
    (a recording, a dry run): no mistake in what alloctune was given, so not exit 2."""

    exit_code = 1


class OptionError(AlloctuneError):
    """An option whose value cannot work, alone or with the others given: `field` names it; the message is an
    `OptionText` (`max_repeats must be at least 3, got 1`; from the CLI: `--max-repeats must be ...`)."""

    def __init__(self, field: str, template: str, **values: Any) -> None:
        super().__init__(OptionText(template, **values))
        self.field = field


class UsageError(AlloctuneError):
    """A command line the parser cannot read (an unknown or missing option, a value of the wrong form): one line
    like every other mistake, naming the command whose --help lists its options."""


class ConfError(AlloctuneError):
    """A PYTORCH_CUDA_ALLOC_CONF string or grid entry that cannot be parsed or is invalid."""


class WorkloadError(AlloctuneError):
    """A workload file that fails validation: the message names the file, the key and what was expected."""


class SizeError(AlloctuneError):
    """A size such as '24GiB' that cannot be parsed."""


class TraceError(AlloctuneError):
    """A trace or snapshot file that cannot be loaded (corrupt, truncated, hostile, unknown format)."""


class ResultsError(AlloctuneError):
    """A results folder or trials file that cannot be read (missing, unknown schema version, no choice made)."""


class FolderBusy(ResultsError):
    """A results folder another alloctune process is writing (its writer lock is held): each command that meets
    one says what to do instead, in its own options."""


class ProbeError(AlloctuneError):
    """The target Python interpreter could not be probed (missing, no torch, crashed)."""


class DiagnoseError(AlloctuneError):
    """An OOM message, snapshot or results folder that holds nothing `diagnose` can read."""


class _Capped(reprlib.Repr):
    """reprlib's bounded repr (a few items per container, a few levels deep: its work and its text stay small
    whatever the value, a tree of shared references or a list nested 200,000 deep), with integers too long to
    print (Python refuses to write more than 4,300 digits) said by their size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict = 3, 4, 4, 4
        self.maxstring = self.maxother = self.maxlong = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 200:   # over 60 digits: reprlib would cut them anyway
            return f"<an integer of about {x.bit_length() * 30103 // 100000} digits>"
        return super().repr_int(x, level)


_CAPPED = _Capped()


def shown(value: object, limit: int = 80) -> str:
    """`value` as an error message shows it: its repr, bounded in the time it takes and cut to `limit`
    characters."""
    try:
        text = _CAPPED.repr(value)
    except Exception:  # a str subclass or an object whose repr fails: say what it is
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


_LONGEST_WORD = 200   # characters of one word of a message: a path is shorter, a pasted file or a typo's paste longer


def bounded(message: str) -> str:
    """A message as a person reads it: each word (a run without whitespace) of more than 200 characters cut, with
    how long it was, so that a value of 100,000 characters given by mistake is not echoed whole, twice."""
    return re.sub(r"\S{%d,}" % (_LONGEST_WORD + 1),
                  lambda m: f"{m.group()[:_LONGEST_WORD - 40]}...({len(m.group()):,} characters)", message)


# What a terminal would act on instead of showing: C0 controls but tab and newline (ESC starts escape sequences, BEL
# rings, CR and backspace overwrite), DEL, C1 controls, and the bidirectional overrides that reorder what follows.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _picture(match: re.Match) -> str:
    code = ord(match.group())
    return chr(0x2400 + code) if code < 0x20 else "\u2421" if code == 0x7f else "\ufffd"


def printable(text: str) -> str:
    """`text` safe to show: each control character a terminal would act on shown as its picture, one character
    for one ('␛' for ESC, '␀' for NUL, '␇' for BEL, '␡' for DEL, '�' for the rest), so that nothing from a trace, a
    GPU's name, a path or a log moves the cursor, rings or rewrites the screen, and columns keep their width."""
    return _CONTROLS.sub(_picture, text)
