"""diagnose: the cause of a CUDA out-of-memory error and the next step, from its message, a memory snapshot or a
results folder's failed trial (the diagnosis package reads them, judges and replays). `alloctune diagnose` and
`alloctune.diagnose()`."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from ..diagnosis import Diagnosis
from ..errors import OptionError, shown
from ..files import checked_path
from .checks import device_index, given, set_field, settings, workers
from .options import options_of


@dataclass(frozen=True)
class DiagnoseOptions:
    """What to read and how to replay it."""

    sources: Sequence[str | os.PathLike] = ()   # a message (or log), a snapshot pickle, a results folder; '-' once
    device: int | None = None              # which device's state, when the snapshot has several
    confs: Sequence[str] | None = None     # settings to replay instead of the default grid
    jobs: int | None = None                # replay worker processes (default: every usable core)
    all_problems: bool = False             # every known problem of the recommended setting, not the few that matter

    def __post_init__(self) -> None:
        sources = (self.sources,) if isinstance(self.sources, (str, os.PathLike)) else self.sources
        if not isinstance(sources, (list, tuple)) or not sources:
            raise OptionError("sources", "diagnose needs a message, a snapshot or a results folder")
        set_field(self, "sources", tuple(checked_path(s, "diagnose") for s in sources))
        device_index(self.device)
        if self.confs is not None:
            set_field(self, "confs", tuple(str(c) for c in settings(self.confs)))
        workers(self.jobs)
        if not isinstance(self.all_problems, bool):
            raise OptionError("all_problems", "{all_problems}: expected True or False, got {got}",
                              got=shown(self.all_problems))


def diagnose(*sources: str | os.PathLike, options: DiagnoseOptions | None = None, **fields: Any) -> Diagnosis:
    """Diagnose the OOM the sources describe: `diagnose("oom-rank0.pickle")`, or a message and its snapshot
    together; `options` (DiagnoseOptions) or its fields as keywords (`device`, `confs`, `jobs`, `all_problems`). The
    result's `recommended_conf` is a setting `sweep(grid=...)` and `replay(confs=...)` take."""
    from ..diagnosis import diagnose as diagnosed

    options = options_of("diagnose", DiagnoseOptions, options, given(fields, sources=sources or None))
    return diagnosed(*options.sources, device=options.device, confs=list(options.confs) if options.confs else None,
                     jobs=options.jobs, all_problems=options.all_problems)
