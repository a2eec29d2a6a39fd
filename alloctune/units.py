"""Sizes as users write them ('24GiB', '143771MiB', '1.5e9') and as we print them."""
from __future__ import annotations

import math
import re

from .errors import SizeError

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", re.IGNORECASE)   # fullmatch

MiB = 2**20
GiB = 2**30
MIN_FRACTION = 2**-20   # of the device: 1 MiB of a card with 1 TiB, which none has; less is a typo, not a budget
# int64: the largest integer a results file holds (results/typed.py reads none larger), so also the largest count,
# seed or step a workload or an option may give
MAX_INT = 2**63 - 1
MAX_INT_TEXT = "2**63 - 1"   # as messages say it
MAX_SIZE = MAX_INT  # as torch and the simulator count bytes; 8 EiB is no device anyone has


def parse_size(text: str | int | float) -> int:
    """Bytes from '24GiB', '143771MiB', '512MB' (decimal), '1G' (binary) or plain bytes."""
    if isinstance(text, bool):
        raise SizeError(f"expected a size such as '24GiB', got {text!r}")
    if isinstance(text, (int, float)):
        return _bytes(text, text)
    match = _SIZE.fullmatch(str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise SizeError(f"expected a size such as '24GiB', '143771MiB' or plain bytes, got {text!r}")
    return _bytes(float(match.group(1)) * _UNITS[match.group(2).lower()], text)


def _bytes(value: int | float, text: object) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        raise SizeError(f"expected a finite size such as '24GiB', got {text!r}")
    if value < 0:
        raise SizeError(f"a size cannot be negative: {text!r}")
    if value > MAX_SIZE:
        raise SizeError(f"a size must be below 8 EiB, got {text!r}")
    return int(value)


def size_argument(value: object, name: str, least: int = 1) -> int:
    """A size given to the Python API (`device_memory=`): bytes as an int, or a size such as '24GiB'. SizeError
    naming `name` when it is neither or below `least` bytes (a negative size, NaN and True are no sizes)."""
    try:
        size = parse_size(value)   # type: ignore[arg-type]   # whatever it was given: refused unless a size
    except SizeError as exc:
        raise SizeError(f"{name}: {exc}") from None
    if size < least:
        raise SizeError(f"{name} must be at least {plural(least, 'byte')}, got {value!r}")
    return size


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """A memory budget: a size ('24GiB') -> (bytes, None), or a fraction of the device ('0.5') -> (None, 0.5)."""
    try:
        value: float | None = float(text)
    except (TypeError, ValueError):
        value = None
    if value is not None and 0 < value <= 1:
        if value < MIN_FRACTION:
            raise SizeError(f"a budget fraction of {text} leaves less than 1 MiB even of a card with 1 TiB: give a "
                            f"fraction of at least {MIN_FRACTION:.1e} or a size such as '24GiB'")
        return None, value
    size = parse_size(text if value is None else value)
    if size < MiB:  # '2' or '24' meant as a fraction or as GiB, not as bytes
        raise SizeError(f"a budget is a size such as '24GiB' or a fraction in (0, 1], got {text!r}")
    return size, None


def budget_share(budget_bytes: int | None, fraction: float | None, device_bytes: int) -> float | None:
    """A budget (`parse_budget`'s) as the fraction of a device of `device_bytes` that it allows: a byte budget as
    its share of that device, at most all of it. None without a budget."""
    if budget_bytes:
        return min(1.0, budget_bytes / device_bytes)
    return fraction or None


def budget_on(budget_bytes: int | None, fraction: float | None, device_bytes: int) -> int | None:
    """A budget (`parse_budget`'s) in bytes on a device of `device_bytes`: a fraction is of that device. None
    without a budget."""
    return int(fraction * device_bytes) if fraction is not None else budget_bytes


_LONGEST = 16   # characters: a figure longer in its format is far beyond any measurement (1e308 tokens/s)
NOT_FINITE = "not finite"


def figure(value: float, spec: str) -> str:
    """`value` in the format `spec` ('.3f', ',.0f', '+.1%'), the one way a figure is printed: where that would take
    more than 16 characters, three significant digits with an exponent ('1e+308', '+1.5e+12%'), and a value that is
    not finite (a figure no measurement gives) flagged as such, never printed as a number."""
    if not math.isfinite(value):
        return NOT_FINITE
    text = format(value, spec)
    if len(text) <= _LONGEST and "inf" not in text:   # '%' multiplies by 100: 1e308 would print as 'inf%'
        return text
    sign = "+" if "+" in spec else ""
    if not spec.endswith("%"):
        return format(value, sign + ".3g")
    if math.isfinite(value * 100):
        return format(value * 100, sign + ".3g") + "%"
    mantissa, exponent = format(value, sign + ".2e").split("e")   # x 100 is past the float range
    return f"{mantissa}e{int(exponent) + 2:+d}%"


def format_bytes(n: int | float | None, digits: int = 2) -> str:
    """'27.31 GiB', '512.00 MiB'; '-' for None."""
    if n is None:
        return "-"
    if not math.isfinite(n):
        return NOT_FINITE
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{figure(n / scale, f'.{digits}f')} {unit}"
    return f"{int(n)} B"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """'1 key', '2 keys', '0 keys' ('nouns' where the plural is not noun + 's')."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def format_number(value: float) -> str:
    """A throughput as a person reads it: whole units from 100 up, else three significant digits (0.0336)."""
    return figure(value, ",.0f" if abs(value) >= 100 else ".3g")
