"""Every numeric key of a setting at the edges of what it takes and past them: each value the registry's own bound
(settings/keys.LARGEST) and torch's sit at (2^31 - 1 for stoi up to torch 2.8, 2^44 - 1 MiB where torch 2.9 on
clamps, 2^55 divisions where 512 * divisions wraps, 2^64 where stoull refuses), the minimums per version, and
fractions at 0, 1 and beyond. The keys come from `AllocConf`'s typed fields, so a new numeric key is covered."""
from __future__ import annotations

import typing
from dataclasses import fields

from alloctune.settings.conf import AllocConf
from alloctune.settings.keys import LARGEST

WHOLE = sorted({1, 2, 10, 11, 12, 19, 20, 21, 40, 1024, LARGEST // 2, LARGEST - 1, LARGEST, LARGEST + 1, 2**31 - 1,
                2**31, 2**44 - 1, 2**44, 2**54, 2**55, 2**63, 2**64 - 1, 2**64, 10**30})
FRACTIONS = ["0", "5e-324", "1e-300", "0.1", "0.5", "0.9999999999999999", "1", "1.0000000000000002", "-0.0", "2",
             "1e-400", "nan", "inf"]


def numeric_keys() -> dict[str, str]:
    """Each numeric key of a setting: 'whole', 'divisions' (a whole number or a list) or 'fraction'."""
    kinds = {}
    for f in fields(AllocConf):
        hint = typing.get_type_hints(AllocConf)[f.name]
        args = set(typing.get_args(hint))
        if float in args:
            kinds[f.name] = "fraction"
        elif int in args:
            kinds[f.name] = "divisions" if len(args) > 2 else "whole"
    return kinds


def boundary_values(kind: str) -> list[str]:
    """The values tried for a key of `kind`: whole numbers at every edge, lists with them as bounds and as divisions,
    fractions at and past both ends."""
    if kind == "fraction":
        return FRACTIONS
    values = [str(v) for v in WHOLE]
    if kind == "divisions":
        values += [f"[{v}:2,>:4]" for v in WHOLE] + [f"[64:{v},>:{v}]" for v in WHOLE]
    return values


def boundary_settings() -> list[str]:
    """One setting per numeric key and value."""
    return [f"{key}:{value}" for key, kind in numeric_keys().items() for value in boundary_values(kind)]
