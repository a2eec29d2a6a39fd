"""A GPU made as small as a limit, for processes to share as they would a smaller card: a ballast process
(`child/ballast.py`, under the command's interpreter, on the trial's GPU) holds all of its free memory but what they
are to share, while the caller runs them (fit's copies at once). The parent's side: start it, wait for its word,
release it.
"""
from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from typing import Iterator

from ..errors import AlloctuneError
from ..processes import kill_group, spawn_group
from ..settings.conf import AllocConf
from ..units import format_bytes
from .task import child_environment

READY_S = 120.0   # for the ballast to start torch and take the memory


@contextlib.contextmanager
def ballast(python: str, gpu: int, leave_bytes: int) -> Iterator[int]:
    """While the block runs, the GPU `gpu` has `leave_bytes` free (less the pages the driver rounds to); yields
    the bytes free as the ballast found them. AlloctuneError where it cannot: less is free, or the ballast failed."""
    from ..child.ballast import MARK, SHORT

    with spawn_group([python, "-m", "alloctune.child.ballast", str(leave_bytes)],
                     env=child_environment(AllocConf(), gpu), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        try:
            line = _first_line(proc)
            if line.startswith(SHORT):
                raise AlloctuneError(f"the GPU has {format_bytes(int(line[len(SHORT):]))} free, less than the "
                                     f"{format_bytes(leave_bytes)} to leave")
            if not line.startswith(MARK):
                raise AlloctuneError(f"the process meant to hold the GPU's memory ended without doing so "
                                     f"(exit status {proc.poll()})")
            yield int(line[len(MARK):])
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()   # its word to let go
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            kill_group(proc)


def _first_line(proc: subprocess.Popen) -> str:
    """The ballast's first line on stdout, "" where it ended or took longer than READY_S without one."""
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_S
    data = b""
    while b"\n" not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        data += chunk
    return data.partition(b"\n")[0].decode("ascii", "replace").strip()
