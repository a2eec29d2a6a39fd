"""Process checks for the tests that make sure alloctune leaves no process behind."""
from __future__ import annotations

import contextlib
from typing import Iterator


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited process lingers as a zombie until its parent, or init, reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # gone, even between open and read
        return False


def cpu_seconds(pid: int) -> float:
    """The CPU time `pid` has used so far (user and system), 0 when it is gone."""
    import os

    try:
        with open(f"/proc/{pid}/stat") as f:
            utime, stime = f.read().rsplit(")", 1)[1].split()[11:13]
    except OSError:
        return 0.0
    return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")


def hear_ctrl_c() -> None:
    """preexec_fn for a process a test will interrupt: SIGINT back to its default, so that Python installs its
    KeyboardInterrupt handler even when the tests run in a background job, which inherits SIGINT ignored."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def processes_hear_ctrl_c() -> Iterator[None]:
    """For processes started inside it by a library (Ray's, which cancels a task with SIGINT): where this process has
    SIGINT ignored (a background job), Python's handler meanwhile, which a started program gets back as the default
    instead of inheriting the ignoring."""
    import signal

    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
