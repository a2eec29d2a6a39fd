"""What a dry run cannot trace, said in one line: `Refused`, raised inside the user's program, ends it at once
(`refuse`) after writing the line where alloctune's parent reads it (`refusal_path`, in the start-up hook's folder),
so that no trace of a run that went another way than the GPU's would is kept, whatever the program catches."""
from __future__ import annotations

import os
import sys

from ..files import write_file

REFUSED_EXIT = 3


class Refused(Exception):
    """The dry run cannot go on: the message says what and why, in one line."""


def refusal_path(folder: str, pid: int | str) -> str:
    return os.path.join(folder, f"dryrun-refused-{pid}.txt")


def refuse(folder: str, message: str) -> None:
    """Write `message` for the parent and end the process here (no atexit handlers: no trace is written)."""
    try:
        write_file(refusal_path(folder, os.getpid()), message.replace("\n", " ") + "\n")
    finally:
        print(f"alloctune record --dry-run: {message}", file=sys.stderr, flush=True)
        os._exit(REFUSED_EXIT)
