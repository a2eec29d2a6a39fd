"""The checks of a fit's options that are a fit's alone (api/checks.py has those use cases share): the parameter's
values, the cards and the context each must hold, and the marks in the command (`{NAME}`, where the value goes);
each refusal an `OptionError` naming its field."""
from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

from ..errors import OptionError, SizeError, shown
from ..units import MAX_INT, MAX_INT_TEXT, GiB, format_bytes, parse_size

MIN_CARD = GiB   # no card with less memory runs a job: a CUDA context alone takes half of it or more
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # a parameter's name, and what a {mark} holds
_MARK = re.compile(r"\{(" + NAME.pattern + r")\}")


def wrong(values: Iterable[object]) -> str:
    """Why one of `values` is no value of the parameter (a whole number from 1 to 2**63 - 1, once), as '...; '."""
    seen: set[int] = set()
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{shown(v)} is not a whole number; "
        if not 1 <= v <= MAX_INT or v in seen:
            why = "given twice" if v in seen else "not above 0" if v < 1 else f"above {MAX_INT_TEXT}"
            return f"{shown(v)} is {why}; "
        seen.add(v)
    return ""


def card(value: object) -> int:
    """A card's memory in bytes, refused unless a size that runs a job (MIN_CARD)."""
    try:
        size = parse_size(value)   # type: ignore[arg-type]   # refused below unless a size
    except SizeError:
        size = 0
    if size <= 0:
        raise OptionError("cards", "{cards} {got}: expected card memories above 0, e.g. 24GiB,80GiB", got=shown(value))
    if size < MIN_CARD:
        raise OptionError("cards", "{cards} {got}: {size} is less than any card that runs a job ({least}); a size "
                          "without a unit is bytes: e.g. 24GiB", got=shown(value), size=format_bytes(size),
                          least=format_bytes(MIN_CARD))
    return size


def check_cards(cards: Sequence[int], overhead: int | None, how: str) -> None:
    """Each card holds more than the CUDA context of one process (`overhead`; None: not known yet), `how` known."""
    if overhead is not None and (small := [c for c in cards if c <= overhead]):
        raise OptionError("cards", "{cards} %s: a card must hold more than the CUDA context each process holds "
                          "(%s, %s)" % (format_bytes(small[0]), format_bytes(overhead), how))


def check_marks(command: Sequence[str], param: str) -> None:
    """A `{NAME}` in the command that is not the parameter's mark is refused where it is a misspelt one: the value
    would not reach the command, which would read `{NAME}` as it is. That is where it stands as a word's value (the
    whole word, or after '=') or its name is close to the parameter's; other braces are the command's own (python -c
    code, JSON)."""
    for word in command:
        for m in _MARK.finditer(word):
            whole = m.end() == len(word) and (m.start() == 0 or word[m.start() - 1] == "=")
            if m[1] != param and (whole or difflib.get_close_matches(m[1], [param], 1, 0.6)):
                raise OptionError("command", "{command} says {mark}, which is not the parameter: fit puts each value "
                                  "of {name} where the command says {want}; did you mean {want}?", mark=m[0],
                                  name=param, want="{" + param + "}")
