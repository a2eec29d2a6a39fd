"""A use case's options from keyword arguments, one way for every api function: each takes its options dataclass
(checked as a whole when made), or its fields as keyword arguments, which win over that object's:
`sweep("w.yaml", preset="h200", repeats=5)`, `export_results(folder, "json", env_id="torch-2.11")`. A name that is
no field, or an options object of another type, is an OptionError naming it. And which options were given
(`options_given`), where some go with one target and not another."""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Sequence, TypeVar

from ..errors import OptionError

T = TypeVar("T")


def split(function: str, given: dict[str, Any], **kinds: type) -> dict[str, dict[str, Any]]:
    """`given` keyword arguments per dataclass of `kinds` (label -> dataclass, e.g. options=SweepOptions,
    callbacks=SweepCallbacks), by field name; a name none of them has is an OptionError listing theirs."""
    names = {label: {f.name for f in fields(kind)} for label, kind in kinds.items()}
    if unknown := sorted(set(given).difference(*names.values())):
        known = "; ".join(f"its {label}: {', '.join(sorted(fields_of))}" for label, fields_of in names.items())
        raise OptionError(unknown[0], "{function}() has no option {given!r}; {known}", function=function,
                          given=unknown[0], known=known)
    return {label: {k: v for k, v in given.items() if k in fields_of} for label, fields_of in names.items()}


def build(kind: type[T], options: T | None, chosen: dict[str, Any], function: str) -> T:
    """`options` (else `kind`'s defaults) with the fields `chosen` set, checked again as a whole."""
    if options is None:
        return kind(**chosen)
    if not isinstance(options, kind):
        raise OptionError("options", "{function}(): the options must be of type {kind}, got {got}", function=function,
                          kind=kind.__name__, got=type(options).__name__)
    return replace(options, **chosen)   # type: ignore[type-var]   # kind is a dataclass: `fields` read it


def options_of(function: str, kind: type[T], options: T | None, given: dict[str, Any]) -> T:
    """`build` of one options dataclass from `function`'s keyword arguments `given`."""
    return build(kind, options, split(function, given, options=kind)["options"], function)


def options_given(options: Any, names: Sequence[str] | None = None) -> list[str]:
    """Those of `names` (default: every field of the dataclass `options`) given, i.e. other than their defaults, in
    that order: what a use case refuses where it does not apply. A default of None means not given: any other value
    counts, the one it stands for too (warmup_steps=2)."""
    defaults = {f.name: f.default for f in fields(options)}
    return [name for name in (defaults if names is None else names) if getattr(options, name) != defaults[name]]
