"""Child processes that never outlive alloctune: trials, probes' children, user commands.

`spawn_group(argv, ...)` starts `argv` as the leader of its own process group (its own session, so a Ctrl-C in the
terminal reaches alloctune alone, which then stops its children in order). Two guards make the whole group die
with alloctune even when alloctune is killed with SIGKILL and runs no code at all:

- the leader gets PR_SET_PDEATHSIG = SIGKILL (Linux `prctl`): the kernel kills it when the thread that spawned it
  ends. It survives `exec`, so it covers any program, but only the leader, not what the leader started;
- a watchdog, a tiny stdlib-only Python process in a session of its own, blocks reading a pipe whose only write
  end alloctune holds. The pipe reaches end-of-file when alloctune closes it (`kill_group`) or dies in any way;
  the watchdog then kills the group (data-loader workers, grandchildren) and removes the folders it was given.
  It has no terminal, stdout or stderr, so `alloctune ... | cat` ends when alloctune does.

Contract: spawn from a thread that lives as long as the child (PDEATHSIG follows the spawning thread), and end
every group with `kill_group(proc)`, or use the returned process as a context manager, which does it on exit.

`temp_folder(prefix)` is a temporary folder (a trial's) that such a watchdog creates and removes: when the block
ends, or when alloctune dies at any moment, even between the folder's creation and the first line of the block
(a Ray worker killed as its task is cancelled, a Ctrl-C landing early), where a folder alloctune created itself
would be left behind.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
from types import TracebackType
from typing import IO, Any, Iterator, Sequence

_PR_SET_PDEATHSIG = 1
try:
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl  # resolved now: nothing is looked up after a fork
except (OSError, AttributeError):  # not Linux: the watchdog alone guards
    _prctl = None

# Runs in the watchdog: argv = [pgid or "", temporary folder prefix or "", folder...]; stdin = the read end of
# the pipe. With a prefix it makes that folder first and writes its path on its stdout.
_WATCHDOG = """
import os, shutil, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
folders = sys.argv[3:]
if sys.argv[2]:
    import tempfile
    folders.append(tempfile.mkdtemp(prefix=sys.argv[2]))
    try:
        os.write(1, (folders[-1] + "\\n").encode())
    except OSError:   # whoever asked for it is gone already: remove it below
        pass
    os.close(1)
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
if sys.argv[1]:
    try:
        os.killpg(int(sys.argv[1]), signal.SIGKILL)
    except OSError:
        pass
for folder in folders:
    shutil.rmtree(folder, ignore_errors=True)
"""

_LOCK = threading.Lock()
_RUNNING: set["GroupProcess"] = set()  # groups not yet ended with kill_group: what kill_all stops


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (thread) ends; exit now if it already has.

    For processes alloctune forks itself (replay workers); `spawn_group` arranges the same for its leaders."""
    parent = os.getppid()
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent or parent == 1:  # the parent went before the request took effect
        os._exit(1)


class GroupProcess(subprocess.Popen[bytes]):
    """A `subprocess.Popen` that leads its own process group, guarded by a watchdog (see the module docstring)."""

    _guard_fd: int | None = None
    _watchdog: subprocess.Popen[bytes] | None = None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        kill_group(self)
        super().__exit__(exc_type, exc, tb)


def spawn_group(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
                stdin: int | IO[Any] | None = subprocess.DEVNULL, stdout: int | IO[Any] | None = None,
                stderr: int | IO[Any] | None = None, remove: Sequence[str | os.PathLike] = ()) -> GroupProcess:
    """Start `argv` as a guarded process group; `remove` lists folders the watchdog deletes once the group is
    killed (per-trial temporary folders: gone even if alloctune is SIGKILLed). Arguments as for Popen."""
    parent = os.getpid()

    def leader_setup() -> None:  # in the child, between fork and exec: no imports, no locks
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(137)

    with _LOCK:  # one spawn at a time, so no other child inherits a guard pipe between pipe() and Popen
        read_end, write_end = os.pipe()  # both close-on-exec: the write end stays ours alone
        try:
            proc = GroupProcess(list(argv), env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                                start_new_session=True, preexec_fn=leader_setup)
            try:
                proc._watchdog = subprocess.Popen(
                    [sys.executable, "-S", "-I", "-c", _WATCHDOG, str(proc.pid), "", *[os.fspath(f) for f in remove]],
                    stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True)
            except BaseException:
                _kill(proc.pid)
                proc.wait()
                raise
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        proc._guard_fd = write_end
        _RUNNING.add(proc)
    return proc


def kill_group(proc: GroupProcess) -> None:
    """Kill the group (the leader and everything it started) and release its watchdog. Safe to call again, and
    after the leader has exited on its own: stragglers it left behind are killed too."""
    _kill(proc.pid)
    with _LOCK:
        fd, proc._guard_fd = proc._guard_fd, None
        _RUNNING.discard(proc)
    if fd is not None:
        os.close(fd)  # the watchdog wakes, kills the group once more (late forks) and removes the folders
    if proc._watchdog is not None:
        try:
            proc._watchdog.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@contextlib.contextmanager
def temp_folder(prefix: str) -> Iterator[str]:
    """A new temporary folder, made and removed by a watchdog (see the module docstring)."""
    with _LOCK:
        read_end, write_end = os.pipe()
        try:
            watchdog = subprocess.Popen([sys.executable, "-S", "-I", "-c", _WATCHDOG, "", prefix], stdin=read_end,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
    folder = ""
    try:
        assert watchdog.stdout is not None
        with watchdog.stdout:
            folder = watchdog.stdout.readline().decode().rstrip("\n")
        if not folder:
            raise OSError(f"the watchdog could not make a temporary folder (exit status {watchdog.wait()})")
        yield folder
    finally:
        os.close(write_end)   # the watchdog wakes and removes the folder
        try:
            watchdog.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if folder:   # and if something killed the watchdog first (Ray kills a worker's children), so do we
            shutil.rmtree(folder, ignore_errors=True)


def kill_all() -> None:
    """Kill every group spawned here that has not been ended (on an interrupt)."""
    with _LOCK:
        running = list(_RUNNING)
    for proc in running:
        _kill(proc.pid)


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:  # already gone
        pass
