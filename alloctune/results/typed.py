"""One checked path from JSON to a typed record, for every file alloctune reads back.

`from_json(Record, data, where)` builds a dataclass from parsed JSON, checking each field against its annotation
(int, float, str, bool, None, unions of them, list[...], tuple[..., ...], dict[str, ...], enums, nested
records, and `Annotated[T, Check(...)]`: a T that must also pass a test, e.g. a byte figure within its kind's
range, `within`). Floats must be finite: JSON's NaN, Infinity and 1e400 are refused wherever they occur, also inside
free-form mappings; so are integers beyond 64 bits (a 400-digit byte count), which no file alloctune writes holds
and which arithmetic on floats would overflow. Keys the record does not know are ignored (a newer alloctune may
add some); a missing key without a default is an error. Every error is one `ResultsError` line naming `where` (the file, and line) and
the field, e.g. `results/x/trials.jsonl:3: field 'measurement.peak_reserved_bytes': expected an integer, got 'a'`.

`load_json(path)` reads a whole JSON file the same way, within MAX_JSON_BYTES and only as a regular file: invalid
UTF-8, invalid JSON, nesting too deep to read and a FIFO or a device in the file's place become one line. Standard library only: trial children import the records.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import sys
import types
import typing
from typing import Annotated, Any, Callable, TypeVar, Union

from ..errors import ResultsError, shown
from ..units import MAX_INT

T = TypeVar("T")
MAX_DEPTH = 64  # no results file nests anywhere near this; deeper input is damage (or an attack on the reader)
# The values a free-form value (a trace's metadata, memory_stats, an environment) may hold: 4 M, the step ends of two
# million steps, far more than any recording; a pickle can repeat one list by reference until 300 bytes hold 2^40.
MAX_PLAIN_VALUES = 1 << 22
# sweep.json, choice.json, search.json: the largest in results/ take 6 KB; a search over 400 settings in several
# interpreters stays below 2 MB
MAX_JSON_BYTES = 64 * 2**20
_INT64 = MAX_INT + 1

_HINTS: dict[type, dict[str, Any]] = {}


@dataclasses.dataclass(frozen=True)
class Check:
    """A mark for `Annotated[T, Check(problem)]`: `problem(value)` says what is wrong with a T, or None."""

    problem: Callable[[Any], "str | None"]


def at_least(minimum: int) -> Check:
    """Numbers no file may hold below `minimum` (a negative ratio)."""
    return Check(lambda value: None if value >= minimum else f"expected at least {minimum}, got {_show(value)}")


def within(low: float, high: float, what: str, least: float = 0.0) -> Check:
    """Figures of a kind (`what`: 'a byte count') no file may hold outside [low, high], nor, with `least`, between
    0 and it: a kind's plausible range, declared with the kind, so that no figure read back takes a sum, product or
    ratio of figures past the largest float."""
    wanted = f"0 or {what} from {least:g} to {high:g}" if least else f"{what} from {low:g} to {high:g}"

    def outside(value: float) -> str | None:
        plausible = low <= value <= high and not 0 < value < least
        return None if plausible else f"expected {wanted}, got {_show(value)}"

    return Check(outside)


class FieldError(ValueError):
    """A value that does not match its annotation; `path` says where inside the record."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


def from_json(cls: type[T], data: object, where: str, error: type[Exception] = ResultsError) -> T:
    """`cls` built from `data`; `error(where: field ...: expected ...)` on any damage."""
    try:
        return _record(cls, data, "")
    except FieldError as exc:
        field = f"field {exc.path!r}: " if exc.path else ""
        raise error(f"{where}: {field}{exc}") from None


def problem(hint: Any, value: object) -> str | None:
    """What the reader would say of `value` as `hint` (an annotation, checks included), or None."""
    try:
        _value(hint, value, "")
    except FieldError as exc:
        return str(exc)
    return None


def checked_text(data: dict[str, Any], read: Callable[[Any, str], object], where: str, **dump: Any) -> str:
    """`data` as JSON text, once `read` (the reader of that file: a record's `from_json`) took it back: what a
    reader would refuse is refused before it is written, as one ResultsError naming `where` and the field."""
    try:
        text = json.dumps(data, allow_nan=False, **dump)
    except ValueError as exc:   # NaN or infinity, which JSON cannot hold
        raise ResultsError(f"{where}: not written, {exc}") from None
    try:
        read(json.loads(text), where)
    except ResultsError as exc:
        raise ResultsError(f"not written, as it would not read back: {exc}") from None
    return text


def loads(text: str | bytes, where: str, error: type[Exception] = ResultsError) -> Any:
    """Parse JSON text (bytes must be UTF-8, a byte-order mark at the start dropped); one `error` line for anything
    wrong with it."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON (nested too deep)") from None
    except ValueError as exc:  # JSONDecodeError, and ints of more than 4300 digits
        raise error(f"{where}: not valid JSON ({exc})") from None


def load_json(path: str | os.PathLike[str], error: type[ResultsError] = ResultsError) -> Any:
    """A whole JSON file (at most MAX_JSON_BYTES), read as `loads` reads text. Every such file is one alloctune
    wrote: anything but a regular file there (a FIFO, a device) is `error`, never waited on nor read as empty."""
    from ..files import read_input   # here: a trial child, which reads records but no file, never loads it

    return loads(read_input(path, MAX_JSON_BYTES, "a results file", error, regular=True), os.fspath(path), error)


def check_plain(value: object, path: str = "") -> None:
    """A free-form JSON value: no non-finite float anywhere, nesting within MAX_DEPTH, MAX_PLAIN_VALUES values at
    most, counted as they are reached (`path` names it in the error)."""
    left = [MAX_PLAIN_VALUES]
    try:
        _plain(value, path, 0, left)
    except _TooMany:
        raise FieldError(path, f"holds more than {MAX_PLAIN_VALUES:,} values (or repeats some by reference)") from None


class _TooMany(Exception):
    pass


def _plain(value: object, path: str, depth: int, left: list[int]) -> None:
    left[0] -= 1
    if left[0] < 0:
        raise _TooMany   # said once, by check_plain, for the whole value
    if depth > MAX_DEPTH:
        raise FieldError(path, f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise FieldError(path, f"expected a finite number, got {value!r}")
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise FieldError(path, f"expected an integer of at most 64 bits, got {shown(value)}")
    if isinstance(value, dict):
        for key, item in value.items():
            _plain(item, f"{path}.{key}" if path else str(key), depth + 1, left)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _plain(item, f"{path}[{i}]", depth + 1, left)


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]), include_extras=True)
    return _HINTS[cls]


def _record(cls: type[T], data: object, path: str) -> T:
    if not isinstance(data, dict):
        raise FieldError(path, f"expected a JSON object, got {_show(data)}")
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        where = f"{path}.{f.name}" if path else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise FieldError(where, "missing")
            continue
        values[f.name] = _value(hints[f.name], data[f.name], where)
    return cls(**values)


def _value(hint: Any, value: object, path: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        value = _value(args[0], value, path)
        for mark in args[1:]:
            if isinstance(mark, Check) and (problem := mark.problem(value)):
                raise FieldError(path, problem)
        return value
    if origin in (Union, types.UnionType):
        return _union(args, value, path)
    if hint is Any or hint is object:
        check_plain(value, path)
        return value
    if dataclasses.is_dataclass(hint):
        return _record(hint, value, path)  # type: ignore[arg-type]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise FieldError(path, f"expected one of {', '.join(repr(m.value) for m in hint)}, "
                                   f"got {_show(value)}") from None
    if hint in (bool, int, float, str):
        return _scalar(hint, value, path)
    if hint in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, (list, tuple)):   # a tuple: a pickle's (a snapshot's pool id)
            raise FieldError(path, f"expected a list, got {_show(value)}")
        item = args[0] if args else Any
        items = [_value(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (hint is tuple or origin is tuple) else items
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise FieldError(path, f"expected a JSON object, got {_show(value)}")
        item = args[1] if args else Any
        return {k: _value(item, v, f"{path}.{k}") for k, v in value.items()}
    raise TypeError(f"typed.from_json cannot check {hint!r} ({path})")  # a programming error, not damage


def _union(options: tuple, value: object, path: str) -> Any:
    """`value` as the first of `options` it is; None for a None where the union allows it."""
    if value is None and type(None) in options:
        return None
    concrete = [a for a in options if a is not type(None)]
    if len(concrete) == 1:  # 'X | None': X's own message, with the inner field's path
        return _value(concrete[0], value, path)
    for option in concrete:
        try:
            return _value(option, value, path)
        except FieldError:
            pass
    raise FieldError(path, f"expected {' or '.join(_name(a) for a in options)}, got {_show(value)}")


def _scalar(hint: type, value: object, path: str) -> Any:
    """A JSON true/false, integer of 64 bits, finite number or string, as `hint` asks."""
    if hint is bool:
        if not isinstance(value, bool):
            raise FieldError(path, f"expected true or false, got {_show(value)}")
    elif hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise FieldError(path, f"expected an integer, got {_show(value)}")
        if not -_INT64 <= value < _INT64:
            raise FieldError(path, f"expected an integer of at most 64 bits, got {_show(value)}")
    elif hint is float:
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or (isinstance(value, int) and not -_INT64 <= value < _INT64) or not math.isfinite(value)):
            raise FieldError(path, f"expected a finite number, got {_show(value)}")
    elif not isinstance(value, str):
        raise FieldError(path, f"expected a string, got {_show(value)}")
    return value


def _name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
            list: "a list"}.get(hint, getattr(hint, "__name__", str(hint)))


def _show(value: object) -> str:
    return shown(value, 60)
