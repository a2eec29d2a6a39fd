"""One process of the user's job, as the code that runs inside it sees it: its rank in the job, and how it leaves a
file. Shared by `dump_on_oom` (`oomdump.py`) and the start-up hook (`trial/hook/sitecustomize.py`). Standard
library only."""
from __future__ import annotations

import os


def rank() -> int | None:
    """RANK, else LOCAL_RANK (what torchrun and most launchers set); None when neither holds a number."""
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def write_whole(path: str, data: bytes) -> None:
    """Write `path` whole or not at all (a temporary file of this process, then a rename): a reader never sees
    half a file, and two processes writing the same path do not mix."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
