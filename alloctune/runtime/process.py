"""One process of the user's job, as the code that runs inside it sees it: its rank in the job. Shared by
`dump_on_oom` (`oomdump.py`) and the start-up hook (`hook/sitecustomize.py`). Standard library only."""
from __future__ import annotations

import os


def rank() -> int | None:
    """RANK, else LOCAL_RANK (what torchrun and most launchers set); None when neither holds a number."""
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None

