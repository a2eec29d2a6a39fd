"""Files alloctune reads from the user and writes for them.

Reading: what the user gives, a path or '-' (standard input), is read in bounded pieces. Each kind of input has
one size limit, defined where that kind is read (a trace, a snapshot, a log, a results file...). A regular file
larger than its limit is refused before a byte of it is read; anything else (a pipe, a device, a file still
growing) is read in pieces and refused as soon as it passes the limit. So `/dev/zero`, `/dev/urandom` or a 3 GB
file cost at most the limit, never all memory. A FIFO without a writer reads as empty at once (it never waits for
one); with a writer it is read as a pipe. A read that fails (a special file such as /proc/self/mem, a disk
error) is the kind's one-line error naming the file. `not_a_file` says what a path that should be a regular file
is instead; `sha256_of` hashes a regular file read so.

Writing (`write_file`): whole or not at all. The content goes into a new temporary file beside the target, is
flushed to the disk (fsync), then renamed over it, so a reader never sees half a file, and a full disk, a text that
cannot be encoded or a crash leave the old file as it was, and no temporary file behind. Every file alloctune writes
for the user (exports, traces, a results folder's files, whatever -o names) is written so. A symbolic link at the
target is replaced, never written through: the file it points to, perhaps outside the results folder, is left
untouched, and a warning says so. A target that is a stream (`streamed`: a character device such as /dev/null or a
terminal, a FIFO, a process's open file such as /dev/stdout or /proc/self/fd/1, or a link to one) is written into,
never replaced (as root, replacing `-o /dev/null` would replace the system's /dev/null); a FIFO no process reads is
refused at once, never waited on.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import warnings
from typing import BinaryIO, Callable

from .errors import AlloctuneError, shown
from .units import format_bytes

_PIECE = 1 << 20
_UMASK = os.umask(0o022)   # read once, at import, and put back: files are created as open() would create them
os.umask(_UMASK)


def checked_path(value: object, what: str) -> str:
    """`value` as a path: a str or os.PathLike, not empty and without NUL (no file has such a name), else an
    AlloctuneError in one line naming `what` it was given as."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str) or not text or "\0" in text:
        raise AlloctuneError(f"{what}: expected a path (a non-empty str or os.PathLike), got {shown(value)}")
    return text


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_a_file(path: str | os.PathLike, mode: int | None = None) -> str | None:
    """Why `path` (or a file of `mode`) is not a regular file a reader can take as one, in words ('does not exist',
    'is a directory, not a regular file'); None for a regular file (through symbolic links)."""
    if mode is None:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return "does not exist"
        except OSError as exc:
            return f"cannot be read: {exc.strerror}"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"is {kind}, not a regular file"


def describe(source: str | os.PathLike) -> str:
    """How messages name a source: its path as given, quoted ('-' for standard input)."""
    return repr(os.fspath(source))


class _Capped(io.RawIOBase):
    """A file descriptor read through, refusing once more than `limit` bytes have come from it; a read that fails
    (/proc/self/mem, a disk error) is `error` naming the source, whoever reads."""

    def __init__(self, fd: int, limit: int, too_large: AlloctuneError, close: bool, name: str,
                 error: type[AlloctuneError]):
        self._fd, self._left, self._too_large, self._close = fd, limit, too_large, close
        self._name, self._error = name, error

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def seekable(self) -> bool:
        return stat.S_ISREG(os.fstat(self._fd).st_mode)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self._fd, offset, whence)

    def tell(self) -> int:
        return os.lseek(self._fd, 0, os.SEEK_CUR)

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        # one byte beyond the limit is asked for, so that an input of exactly `limit` bytes reads whole
        try:
            got = os.readv(self._fd, [view[:min(len(view), self._left + 1)]])
        except OSError as exc:
            raise self._error(f"cannot read {describe(self._name)}: {exc.strerror or exc}") from None
        if got > self._left:
            raise self._too_large
        self._left -= got
        return got

    def close(self) -> None:
        if not self.closed and self._close:
            os.close(self._fd)
        super().close()


def open_input(source: str | os.PathLike, limit: int, what: str,
               error: type[AlloctuneError] = AlloctuneError, whole: bool = True,
               regular: bool = False) -> io.BufferedReader:
    """`source` opened for reading in binary, at most `limit` bytes of it: beyond that, reading raises `error`
    ("'x' is larger than the 2.00 GiB alloctune reads as a memory snapshot"). OSError when it cannot be opened.
    '-' is standard input, which closing the result leaves open. `whole=False`: the caller reads only part of a
    regular file, seeking to it (a log's end), so one of any size opens; what is read is still capped.
    `regular`: anything but a regular file (a FIFO, a device, standard input) is refused, as `error`, before a byte
    of it is read: for what alloctune reads back from a file it wrote, or reads again later (a trace's digest)."""
    name = checked_path(source, what)
    too_large = error(f"{describe(name)} is larger than the {format_bytes(limit)} alloctune reads as {what}")
    if name == "-":
        if regular:
            raise error(f"'-' (standard input) cannot be {what}: give its path")
        fd, close = _stdin_descriptor(what, error), False
    else:
        # Without O_NONBLOCK a FIFO's open waits for a writer, for ever if none comes: opened at once, it reads as
        # empty without one, and as a pipe (blocking) with one.
        fd, close = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK), True
        os.set_blocking(fd, True)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{describe(name)} is a directory, not {what}")
        if regular and (problem := not_a_file(name, info.st_mode)):
            raise error(f"{describe(name)} {problem}: alloctune reads {what} from a file")
        if whole and stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise too_large
    except BaseException:
        if close:
            os.close(fd)
        raise
    return io.BufferedReader(_Capped(fd, limit, too_large, close, name, error), _PIECE)


def _stdin_descriptor(what: str, error: type[AlloctuneError]) -> int:
    """Standard input's file descriptor, read from below sys.stdin; `error` in one line where it has none: a
    notebook's or an IDE console's sys.stdin (fileno() raises), or None (the process started without one)."""
    try:
        return sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):   # io.UnsupportedOperation is both of the last two
        raise error(f"'-' is standard input, which has no file descriptor here (a notebook's sys.stdin has none): "
                    f"give the path of {what}") from None


def read_tail(path: str | os.PathLike, limit: int) -> bytes:
    """The last `limit` bytes of the file `path` (all of a smaller one), read from there: a job's output of
    gigabytes costs `limit`."""
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
        return f.read(limit)


def read_input(source: str | os.PathLike, limit: int, what: str,
               error: type[AlloctuneError] = AlloctuneError, regular: bool = False) -> bytes:
    """All of `source` (see `open_input`)."""
    with open_input(source, limit, what, error, regular=regular) as f:
        return f.read()


def read_text(source: str | os.PathLike, limit: int, what: str,
              error: type[AlloctuneError] = AlloctuneError, regular: bool = False) -> str:
    """All of `source` as UTF-8 text (see `open_input`), a byte-order mark at its start dropped (editors on Windows
    write one); `error` when it is not UTF-8."""
    data = read_input(source, limit, what, error, regular)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{describe(source)} is not UTF-8 text (byte {exc.start})") from None


def yaml_problem(exc: Exception, text: str) -> str:
    """A PyYAML error in `text` in one line, where it is and what is wrong: "line 2, column 2: expected ',' or ']',
    but got ':' (while parsing a flow sequence at line 1, column 4)". PyYAML's own message spans lines, quoting the
    input with a caret under the place, and names the input "<unicode string>"."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None and isinstance(position := getattr(exc, "position", None), int):   # a character it refuses
        before = text[:position]
        row, column = before.count("\n") + 1, position - before.rfind("\n")
        return (f"line {row}, column {column}: unacceptable character #x{getattr(exc, 'character', 0):04x}: "
                f"{getattr(exc, 'reason', '')}")
    if mark is None or problem is None:
        return " ".join(str(exc).split())
    line = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if context := getattr(exc, "context", None):
        at = getattr(exc, "context_mark", None)
        line += f" ({context}" + (f" at line {at.line + 1}, column {at.column + 1})" if at else ")")
    return line


def read_head(path: str | os.PathLike, count: int, what: str, error: type[AlloctuneError] = AlloctuneError) -> bytes:
    """The first `count` bytes of the regular file `path` (all of a shorter one; see `open_input`): a FIFO or a
    device is `error`, never waited on or read."""
    with open_input(path, count, what, error, whole=False, regular=True) as f:
        return f.raw.read(count) or b""


def sha256_of(path: str | os.PathLike, limit: int, what: str, error: type[AlloctuneError] = AlloctuneError) -> str:
    """The SHA-256 (hexadecimal) of the regular file `path`, read in pieces within `limit` (see `open_input`)."""
    digest = hashlib.sha256()
    with open_input(path, limit, what, error, regular=True) as f:
        while piece := f.read(_PIECE):
            digest.update(piece)
    return digest.hexdigest()


def write_file(path: str | os.PathLike, content: str | bytes | Callable[[BinaryIO], object]) -> None:
    """Write `path` whole or not at all (see the module docstring); a stream (`streamed`) is written into.
    `content`: text (UTF-8; text that holds a path that is not UTF-8 keeps that path's bytes, as the file system
    has them), bytes, or a function that writes to the open file (a plot's `savefig`)."""
    path = os.fspath(path)
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogateescape")
    if streamed(path):
        _write_stream(path, content)
        return
    folder, name = os.path.split(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
        os.fchmod(fd, 0o666 & ~_UMASK)   # as open() would create it (mkstemp makes it private)
        with os.fdopen(fd, "wb") as f:
            _put(f, content)
            os.fsync(f.fileno())   # the bytes on the disk before the name points at them
        put_in_place(tmp, path)
        sync_folder(folder or ".")
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):   # named by the file it was for, not by the temporary one
            raise OSError(exc.errno, exc.strerror, path) from None
        raise


def _put(f: BinaryIO, content: bytes | Callable[[BinaryIO], object]) -> None:
    if isinstance(content, bytes):
        f.write(content)
    else:
        content(f)
    f.flush()


# A process's open file, as Linux names it: /proc/self/fd/1, /proc/4242/task/4243/fd/3, /dev/fd/1.
_OPEN_FILE = re.compile(r"/(?:proc/(?:self|thread-self|\d+)(?:/task/\d+)?|dev)/fd/\d+")
_LINKS_FOLLOWED = 40   # as the kernel follows at most


def streamed(path: str | os.PathLike) -> bool:
    """Whether `path` is a stream that `write_file` writes into rather than a file it replaces: a character device
    (/dev/null, a terminal), a FIFO, or a process's open file (/dev/stdout, /proc/self/fd/1, a link to one). A block
    device or a socket is refused (AlloctuneError): neither is a file to replace nor a stream to write."""
    try:
        mode = os.stat(path).st_mode
    except OSError:   # a new file (or a link to none): written whole
        return False
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise AlloctuneError(f"{os.fspath(path)} {not_a_file(path, mode)}: alloctune writes a file, a character "
                             f"device or a FIFO")
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or _open_file(os.fspath(path))


def _open_file(path: str) -> bool:
    """Whether `path`, or a link it leads through, names a process's open file (`_OPEN_FILE`)."""
    here = os.path.abspath(path)
    for _ in range(_LINKS_FOLLOWED):
        here = os.path.join(os.path.realpath(os.path.dirname(here)), os.path.basename(here))
        if _OPEN_FILE.fullmatch(here):
            return True
        try:
            here = os.path.join(os.path.dirname(here), os.readlink(here))
        except OSError:   # no link: the end of the chain
            return False
    return False


def _write_stream(path: str, content: bytes | Callable[[BinaryIO], object]) -> None:
    """`content` written into the stream `path`, appended where it is a file (stdout sent to one), never replacing
    it. A FIFO no process reads is refused at once: waiting for a reader could last for ever."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise AlloctuneError(f"{path} is a FIFO (named pipe) that no process reads: start its reader first, "
                                 f"or give a file") from None
        raise OSError(exc.errno, exc.strerror, path) from None
    os.set_blocking(fd, True)
    with os.fdopen(fd, "wb") as f:
        _put(f, content)


def put_in_place(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename the file `source` over `path`. A symbolic link at `path` is replaced, never written through: what it
    points to is left as it was, and a warning says so."""
    if os.path.islink(path):
        warnings.warn(f"{os.fspath(path)} was a symbolic link to {os.readlink(path)}: replaced it with the file "
                      f"itself, leaving what it pointed to as it was")
    os.replace(source, path)


def copy_whole(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Copy the file `source` to `path` as `write_file` writes (whole or not at all), in pieces."""
    with open(source, "rb") as f:
        write_file(path, lambda out: shutil.copyfileobj(f, out, _PIECE))


def sync_folder(folder: str | os.PathLike) -> None:
    """Renames in `folder` on the disk, where the file system lets a folder be synced."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
