"""The names every command gives the same things, once: in each command's --json (the keys a setting's figures
carry, what the default setting is called) and in words (whether a figure was measured, replayed or predicted).

- A setting is named by `setting_name`: its canonical string, "default" for the default (never "").
- Every figure says its `Basis`: measured on a GPU, replayed (the allocator simulated on a recorded trace, exact to
  the trace), or predicted (a model: driver work priced by a calibration, a fitted curve), with its resolution or
  measured error where one is known.
- A replayed figure names the torch whose allocator the simulator followed (`SIMULATED_TORCH`).
- A ratio beside a word of direction is printed by `times`, which never shows 1.00x for a ratio that is not 1; a
  relative change by `signed_percent`, which never shows a sign before 0.0%.
- The keys of a setting's memory figures: `SETTING`, `BASIS`, `FITS`, `PEAK_RESERVED`, `PEAK_ALLOCATED`
  (`figures`), the same in replay, search, fleet, fit and diagnose; a sweep's choice gives its settings `SETTING`,
  `BASIS`, `PEAK_RESERVED` and `PEAK_ALLOCATED`, and a `state` that says more than `FITS` would
  (report/analysis.named). Files keep their own names (choice.json and fit.json the allocator's "" for the default),
  read by their typed readers; the names here are what a command prints.
"""
from __future__ import annotations

import math
from enum import Enum

from ..settings.conf import conf_label
from ..units import figure

SETTING, BASIS, FITS = "conf", "basis", "fits"
PEAK_RESERVED, PEAK_ALLOCATED = "peak_reserved_bytes", "peak_allocated_bytes"
SIMULATED_TORCH = "simulated_torch"   # the torch whose allocator a replay followed ('2.11')


class Basis(str, Enum):
    """How a figure was obtained."""

    MEASURED = "measured"     # on a GPU, in trials
    REPLAYED = "replayed"     # the allocator simulated on a recorded trace
    PREDICTED = "predicted"   # from a model (a calibration's prices, a fitted curve)

    @classmethod
    def of_trials(cls, simulated: bool) -> "Basis":
        """The basis of a trial's, a choice's or a column's figures: replayed where the simulator made them."""
        return cls.REPLAYED if simulated else cls.MEASURED


def setting_name(conf: str | None) -> str:
    """A setting as every JSON and table names it: 'default' for the default."""
    return conf_label(conf)


def figures(conf: str | None, basis: Basis, fits: bool | None, peak_reserved: int | None,
            peak_allocated: int | None) -> dict:
    """A setting's memory figures under the shared keys."""
    return {SETTING: setting_name(conf), BASIS: basis.value, FITS: fits, PEAK_RESERVED: peak_reserved,
            PEAK_ALLOCATED: peak_allocated}


def times(ratio: float, digits: int = 2) -> str:
    """A ratio as '1.03x': with more digits (up to 4) where fewer would round it to 1 though it is not, so that
    '1.00x' never stands beside 'slower' or 'faster' (0.997 reads '0.997x')."""
    if not math.isfinite(ratio):
        return figure(ratio, ".2f")
    # a ratio that still reads 1 at 4 places is as good as 1: said with the usual digits
    places = next((p for p in range(digits, 5) if float(f"{ratio:.{p}f}") != 1), digits)
    return f"{figure(ratio, f'.{places}f')}x"


def signed_percent(change: float) -> str:
    """A relative change as '+2.1%', '-33.3%': with more places (up to 3) where one would round it to 0 though it is
    not, so that no sign stands before 0.0% (-0.0004 reads '-0.04%'); a change that still reads 0 at 3 places is as
    good as none: '0.0%'."""
    if not math.isfinite(change):
        return figure(change, "+.1%")
    places = next((p for p in range(1, 4) if float(f"{change * 100:.{p}f}") != 0), None)
    return "0.0%" if places is None else figure(change, f"+.{places}%")
