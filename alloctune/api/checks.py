"""The checks that fields of several use cases' options share (sizes, counts, worker processes, settings, paths,
a grid file or the settings themselves, standard input read once), each refusal an `OptionError` naming its field
(the CLI shows its flag); and what a use case tells its caller as it goes (`Progress`)."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ..errors import ConfError, OptionError, SizeError, shown
from ..settings.conf import AllocConf
from ..units import MAX_INT, MAX_INT_TEXT, parse_size

# What a use case tells its caller as it goes: a phase by name as it starts (None), or with (done, total) as it
# counts; none of it changes what the use case does. The CLI draws it on standard error (report/progress.py).
Progress = Callable[[str, "tuple[int, int] | None"], None]


def quiet(name: str, count: tuple[int, int] | None) -> None:
    """The progress of a caller that asked for none."""


def size(value: object, field: str, least: int = 1) -> int:
    """A size option: bytes as an int, or a size such as '24GiB'."""
    try:
        parsed = parse_size(value)   # type: ignore[arg-type]   # whatever it was given: refused unless a size
    except SizeError as exc:
        raise OptionError(field, "{%s}: {why}" % field, why=str(exc)) from None
    if parsed < least:
        raise OptionError(field, "{%s} must be above %s, got {got!r}" % (field, "0" if least == 1 else least - 1),
                          got=value)
    return parsed


def count(value: object, field: str, least: int = 1) -> int:
    """A whole number from `least`, of 64 bits (what a results file holds)."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_INT:
        raise OptionError(field, "{%s} must be a whole number from {least} to {most}, got {got}" % field,
                          least=least, most=MAX_INT_TEXT, got=shown(value))
    return value


def workers(value: object, field: str = "jobs") -> int | None:
    """A number of worker processes: None (every usable core) or a whole number of at least 1."""
    return None if value is None else count(value, field)


def settings(value: object, field: str = "confs") -> tuple[str | AllocConf, ...]:
    """Settings named: one (a str such as 'expandable_segments:True', 'default' for the default, or an AllocConf)
    or a sequence of them; each is parsed here, so that a malformed one stops the call before any work."""
    items = (value,) if isinstance(value, (str, AllocConf)) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, (str, AllocConf)) for v in items):
        raise OptionError(field, "{%s}: a setting is a str such as 'expandable_segments:True' or an AllocConf, "
                          "got {got}" % field, got=shown(value))
    for item in items:
        if isinstance(item, str):
            AllocConf.parse(item)   # a ConfError saying what is wrong with it
    return tuple(items)


def path(value: object, field: str) -> str:
    """A path option: a non-empty str or os.PathLike without NUL ('-': standard input where the option reads)."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str) or not text or "\0" in text:
        raise OptionError(field, "{%s}: expected a path (a non-empty str or os.PathLike), got {got}" % field,
                          got=shown(value))
    return text


def grid_file(value: object) -> str:
    """The `grid` of replay, fleet and fit: a file listing settings ('-': standard input). Settings given there
    instead (a list, or one setting that names no file) are refused in one line that points at `confs`, which takes
    them: sweep's `grid` is that list (`grid_settings`)."""
    if isinstance(value, (list, tuple, AllocConf)) or (isinstance(value, str) and value and _a_setting(value)
                                                        and not os.path.exists(value)):
        raise OptionError("grid", "{grid} is a file listing settings (a YAML list, or one a line), got {got}: the "
                          "settings themselves go in {confs}", got=shown(value))
    return path(value, "grid")


def grid_settings(entries: Sequence[object] | None) -> None:
    """Sweep's `grid`: the settings themselves (what replay, fleet and fit take as `confs`); a file given there is
    refused in one line (`grid_file` is the file's option)."""
    for entry in entries or ():
        if isinstance(entry, os.PathLike) or (isinstance(entry, str) and not _a_setting(entry)
                                              and os.path.isfile(entry)):
            raise OptionError("grid", "{grid} takes the settings themselves, such as 'expandable_segments:True', "
                              "not a file ({got} is one): give the file's settings (the command line reads them "
                              "with --grid FILE)", got=shown(entry))


def _a_setting(text: str) -> bool:
    try:
        AllocConf.parse(text)
    except ConfError:
        return False
    return True


def one_stdin(paths: Sequence[object], field: str, among: str) -> None:
    """'-' (standard input) read once at most among `paths`; `among` names them (a template: '{grid}' an
    option)."""
    if list(paths).count("-") > 1:
        raise OptionError(field, "'-' (stdin) can be given once, among " + among)


def in_bytes(value: object) -> int | None:
    """A size option as its options' __post_init__ holds it (`size`): bytes, or None where not given."""
    assert value is None or isinstance(value, int)
    return value


def given(fields: dict[str, Any], **positional: object) -> dict[str, Any]:
    """A use case's keyword arguments with those it also takes by position, where given (None: not given)."""
    return {**{name: value for name, value in positional.items() if value is not None}, **fields}


def set_field(options: object, name: str, value: object) -> None:
    """A field of frozen options made canonical in their __post_init__ (a list held as a tuple, a size in bytes)."""
    object.__setattr__(options, name, value)


def device_index(device: object) -> None:
    """A CUDA device index (0, 1, ...) or None."""
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise OptionError("device", "{device}: expected a CUDA device index (0, 1, ...), got {got}", got=shown(device))
