"""The real command line, run from this checkout in a fresh interpreter."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
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
