"""Who judges whether a target torch accepts a setting: a `Validator` takes settings and gives a `SettingsCheck`.

The search (`sim/search.py`) takes one as an argument; the trial layer's probe provides the real one, which asks the
target interpreter's own torch (`trial/probe.py`); `table_judge` judges by alloctune's version table alone, for a torch
that is not installed here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .conf import AllocConf
from .versions import check_conf


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


def table_judge(torch_version: str) -> Validator:
    """A `Validator` for torch `torch_version` from the version table alone (method 'static')."""
    def judge(confs: Sequence[AllocConf]) -> SettingsCheck:
        return SettingsCheck(torch_version, "static", {str(c): check_conf(c, torch_version) for c in confs})
    return judge
