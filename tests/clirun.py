"""The real command line, run from this checkout in a fresh interpreter."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd: str | Path = ROOT, timeout: float = 300,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m alloctune ARGS` (Path arguments welcome), `stdin` as its standard input (else none), stdout and
    stderr captured as text."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env, input=stdin,
                          stdin=subprocess.DEVNULL if stdin is None else None)
