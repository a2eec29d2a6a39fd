"""The names every command gives the same things, once: in each command's --json (the keys a setting's figures
carry, what the default setting is called) and in words (whether a figure was measured, replayed or predicted).

- A setting is named by `setting_name`: its canonical string, "default" for the default (never "").
- Every figure says its `Basis`: measured on a GPU, replayed (the allocator simulated on a recorded trace, exact to
  the trace), or predicted (a model: driver work priced by a calibration, a fitted curve), with its resolution or
  measured error where one is known.
- A replayed figure names the torch whose allocator the simulator followed (`SIMULATED_TORCH`).
- The keys of a setting's memory figures: `SETTING`, `BASIS`, `FITS`, `PEAK_RESERVED`, `PEAK_ALLOCATED`
  (`figures`), the same in replay, search, fleet, fit, diagnose and a sweep's choice.
"""
from __future__ import annotations

from enum import Enum

from ..settings.conf import conf_label

SETTING, BASIS, FITS = "conf", "basis", "fits"
PEAK_RESERVED, PEAK_ALLOCATED = "peak_reserved_bytes", "peak_allocated_bytes"
SIMULATED_TORCH = "simulated_torch"   # the torch whose allocator a replay followed ('2.11')


class Basis(str, Enum):
    """How a figure was obtained."""

    MEASURED = "measured"     # on a GPU, in trials
    REPLAYED = "replayed"     # the allocator simulated on a recorded trace
    PREDICTED = "predicted"   # from a model (a calibration's prices, a fitted curve)


def setting_name(conf: str | None) -> str:
    """A setting as every JSON and table names it: 'default' for the default."""
    return conf_label(conf)


def figures(conf: str | None, basis: Basis, fits: bool | None, peak_reserved: int | None,
            peak_allocated: int | None) -> dict:
    """A setting's memory figures under the shared keys."""
    return {SETTING: setting_name(conf), BASIS: basis.value, FITS: fits, PEAK_RESERVED: peak_reserved,
            PEAK_ALLOCATED: peak_allocated}
