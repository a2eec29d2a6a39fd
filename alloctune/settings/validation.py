"""Who judges whether a target torch accepts a setting: a `Validator` takes settings and gives a `SettingsCheck`.

The search (`sim/search.py`) takes one as an argument; the trial layer's probe provides the real one, which asks the
target interpreter's own torch (`trial/probe.py`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .conf import AllocConf


@dataclass(frozen=True)
class SettingsCheck:
    """Verdicts on settings for one interpreter. `method` says who judged:
    'torch' = its torch's parser alone; 'torch+static' = its parser for values, alloctune's version table for keys
    (the parser skips keys it does not own); 'static' = the version table only (this torch cannot parse without
    a GPU, or has no run-time parser)."""

    torch_version: str
    method: str
    verdicts: dict[str, str | None]   # setting -> None if accepted, else why not


# The target torch's judge: verdicts on these settings (an empty list still says the torch version).
Validator = Callable[[Sequence[AllocConf]], SettingsCheck]
