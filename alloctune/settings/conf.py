"""PYTORCH_CUDA_ALLOC_CONF strings: parse them into an `AllocConf`, print them back canonically.

Only syntax and value types are checked here. Which keys and ranges a given torch version accepts is
version knowledge and lives in `versions.py`.

One rule makes every setting safe to paste (`SAFE_VALUE`): it goes into environments, env files, Dockerfiles,
Kubernetes specs and commands printed for the user to copy, so nothing in it may be read specially by a shell or
those readers. The values alloctune parses are printed back in canonical form, made of letters, digits and
`_ . , : [ ] >` (the `>` of a divisions list, `[256:1,>:8]`); a key it does not parse (`pinned_*`, ...) keeps its
value verbatim, so that value must be a plain word: letters, digits and `_ . + -`, what torch's own values are
(True, False, numbers). Anything else (`1>FILE`, `$(...)`, backticks, `;`, quotes, `${HOME}`, spaces) is refused
where the setting is parsed: before any trial runs, and again wherever a file names one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfError, shown
from .keys import KEYS, DivisionList, format_value

SAFE_VALUE = re.compile(r"[A-Za-z0-9_.+\-]+")   # a verbatim value (see the module docstring)
_SAFE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def conf_label(conf: str | None) -> str:
    """What tables and sentences call a canonical setting: 'default' for the empty one (or none)."""
    return conf or "default"

@dataclass(frozen=True)
class AllocConf:
    """One allocator setting. `None` means "key not given" (PyTorch's default applies).

    Field order is the canonical key order of `str(conf)`. A field for each key that `keys.KEYS` parses, in the
    table's order (its entry gives the value's parser; tests/settings/test_keys.py holds the two together); every
    other key stays verbatim in `extra`.
    """

    backend: str | None = None
    expandable_segments: bool | None = None
    max_split_size_mb: int | None = None
    roundup_power2_divisions: int | DivisionList | None = None
    garbage_collection_threshold: float | None = None
    max_non_split_rounding_mb: int | None = None
    large_segment_size_mb: int | None = None
    per_process_memory_fraction: float | None = None
    # Keys that do not change the device memory layout (pinned_*, release_lock_on_cudamalloc, ...):
    # kept verbatim so that they reach the child process, ignored by the simulator.
    extra: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> "AllocConf":
        """Parse 'expandable_segments:True,max_split_size_mb:128'. '' and 'default' give the default."""
        text = (text or "").strip()
        if text in ("", "default"):
            return cls()
        values: dict[str, Any] = {}  # each value of the type its key's parser gives its field
        extra: list[tuple[str, str]] = []
        for item in _split_top_level(text):
            key, sep, raw = item.partition(":")
            key, raw = key.strip(), raw.strip()
            if not sep or not key or not raw:
                raise ConfError(f"expected 'key:value' in allocator setting {text!r}, got {item!r}")
            if key in values or any(k == key for k, _ in extra):
                raise ConfError(f"key {key!r} given twice in {text!r}")
            parse = KEYS[key].parse if key in KEYS else None
            if parse is not None:
                values[key] = parse(key, raw)
            else:
                extra.append((_checked_key(key, text), _verbatim(key, raw)))
        return cls(**values, extra=tuple(extra))

    def __str__(self) -> str:
        """Canonical PyTorch form; '' for the default."""
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or value is None:
                continue
            parts.append(f"{f.name}:{format_value(value)}")
        parts.extend(f"{k}:{v}" for k, v in self.extra)
        return ",".join(parts)

    @property
    def label(self) -> str:
        return conf_label(str(self))

    @property
    def is_default(self) -> bool:
        return str(self) == ""

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys this setting gives, in canonical order."""
        given = tuple(f.name for f in fields(self) if f.name != "extra" and getattr(self, f.name) is not None)
        return given + tuple(k for k, _ in self.extra)

    @property
    def complexity(self) -> int:
        """Number of keys given: ties in selection go to the setting with fewer."""
        return len(self.keys)

    @property
    def is_async(self) -> bool:
        return self.backend == "cudaMallocAsync"


def canonical(text: str) -> str:
    """The canonical form of a setting string; one that does not parse is kept as written (skipped settings)."""
    try:
        return str(AllocConf.parse(text))
    except ConfError:
        return text


def _checked_key(key: str, text: str) -> str:
    if not _SAFE_KEY.fullmatch(key):
        raise ConfError(f"allocator setting {shown(text)} has a key {shown(key)} that is not a name (letters, digits "
                        f"and _): no torch has such a key, and a shell would not read it literally")
    return key


def _verbatim(key: str, raw: str) -> str:
    if not SAFE_VALUE.fullmatch(raw):
        raise ConfError(f"{key}: the value {shown(raw)} holds characters that a shell, an env file or YAML would not "
                        f"read literally; a value is letters, digits and _ . + - (True, False, a number)")
    return raw


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside [...]."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfError(f"unbalanced ']' in allocator setting {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ConfError(f"unbalanced '[' in allocator setting {text!r}")
    items.append(text[start:])
    return [item for item in (s.strip() for s in items) if item] or [""]
