"""The real command line, run from this checkout in a fresh interpreter (`cli`), or through its main() in the test's
own process (`in_process`) where the subject is what it prints, not how a process starts, ends or meets its streams."""
from __future__ import annotations

import contextlib
import io
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd: str | Path = ROOT, timeout: float = 300, stdin: str | None = None,
        env: dict[str, str] | None = None, merged: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m alloctune ARGS` (Path arguments welcome), `stdin` as its standard input (else none), `env` added
    to this environment, stdout and stderr captured as text: apart, or `merged` into stdout in the order written
    (unbuffered, as a log of `2>&1` holds them)."""
    env = dict(os.environ, **(env or {}), PYTHONPATH=str(ROOT))
    if merged:
        env["PYTHONUNBUFFERED"] = "1"
    streams = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT) if merged else dict(capture_output=True)
    return subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], text=True, cwd=cwd,
                          timeout=timeout, env=env, input=stdin,
                          stdin=subprocess.DEVNULL if stdin is None else None, **streams)


def in_process(*args, cwd: str | Path = ROOT, env: dict[str, str] | None = None,
               stdin: str | bytes | None = None) -> subprocess.CompletedProcess[str]:
    """`alloctune ARGS` as main() runs it, in this process: `env` added to the environment while it runs (its
    children, the probe among them, inherit it), in `cwd`, with the sys.argv `python -m alloctune ARGS` has (a sweep
    records it as its command); standard output and error captured apart, neither a terminal, as `cli` has them;
    `stdin`, where given, its standard input through a pipe, as `cli` gives it. It spares a fresh interpreter's start
    and alloctune's imports (matplotlib's among them, for every command that draws a plot)."""
    from alloctune.cli.main import main

    out, err, here, argv, given = io.StringIO(), io.StringIO(), os.getcwd(), sys.argv, sys.stdin
    before = {name: os.environ.get(name) for name in env or {}}
    feeder = None
    try:
        os.environ.update(env or {})
        os.chdir(cwd)
        sys.argv = [str(ROOT / "alloctune" / "__main__.py"), *map(str, args)]
        if stdin is not None:
            sys.stdin, feeder = _piped(stdin.encode() if isinstance(stdin, str) else stdin)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(sys.argv[1:])
            except SystemExit as stop:   # argparse: --help, or a usage error
                code = stop.code if isinstance(stop.code, int) else 2
    finally:
        if feeder is not None:
            sys.stdin.close()   # the read end: a writer still blocked on a full pipe gets EPIPE and ends
            feeder.join()
        sys.argv, sys.stdin = argv, given
        os.chdir(here)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(["alloctune", *map(str, args)], code, out.getvalue(), err.getvalue())


def _piped(data: bytes) -> tuple[io.TextIOWrapper, threading.Thread]:
    """A pipe's read end as a text stream, and the thread that writes `data` into it and closes it (a pipe holds
    64 KiB: more would block a writer in this thread)."""
    read, write = os.pipe()

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError), open(write, "wb") as pipe:
            pipe.write(data)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    return open(read, encoding="utf-8"), feeder


def suggested(text: str, label: str) -> list[str]:
    """The words of the command printed after `label` ('Next:'), as a shell reads it: on the label's line, or on
    the indented lines below it, continued by a trailing backslash (report/layout.py's `command`)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(label))
    rest, command = lines[at][len(label):].strip(), []
    if rest:
        return shlex.split(rest)
    for line in lines[at + 1:]:
        command.append(line.strip().removesuffix("\\"))
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(command))
