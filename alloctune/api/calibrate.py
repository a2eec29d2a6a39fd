"""`calibrate()`: this GPU's driver-call costs measured now (trial/calibration.py) and kept in the per-user store,
where sweeps on this GPU model, driver, torch and host CPU find them; what `alloctune calibrate` runs."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OptionError, shown
from ..results.calibration import Calibration, write_calibration
from ..trial.calibration import measure, store
from .options import options_of


@dataclass(frozen=True)
class CalibrateOptions:
    gpu: int = 0                              # the GPU's index
    python: str = sys.executable              # the interpreter whose torch is calibrated
    output: str | os.PathLike | None = None   # also write the calibration (JSON) here

    def __post_init__(self) -> None:
        if isinstance(self.gpu, bool) or not isinstance(self.gpu, int) or self.gpu < 0:
            raise OptionError("gpu", "{gpu} must be a GPU index >= 0, got {got}", got=shown(self.gpu))
        if not isinstance(self.python, str) or not self.python:
            raise OptionError("python", "{python} must be an interpreter's path, got {got}", got=shown(self.python))


@dataclass(frozen=True)
class Calibrated:
    calibration: Calibration
    stored: Path                # where the per-user store keeps it
    written: Path | None        # `output`, where asked


def calibrate(options: CalibrateOptions | None = None, **fields: Any) -> Calibrated:
    """Measure the GPU's cost of the allocator's driver calls (about 40 s) and keep it for sweeps on this GPU.
    `options` (a CalibrateOptions) or its fields as keywords: `calibrate(gpu=1, output="h200.json")`."""
    options = options_of("calibrate", CalibrateOptions, options, fields)
    calibration = measure(options.python, options.gpu)
    stored = store(calibration)
    if options.output is not None:
        write_calibration(options.output, calibration)
    return Calibrated(calibration, stored, Path(options.output) if options.output is not None else None)
