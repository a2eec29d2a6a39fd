"""The command line run within a time limit and an address-space limit, for the tests that bound what an input may
cost: past the memory limit the child's allocations fail (a MemoryError, not a refusal), past the time it is
killed."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

from clirun import ROOT

MiB = 2**20
# alloctune with numpy and its thread pools, a probe child importing torch, or a search's replay workers each run
# within 768 MiB of address space (measured on the CPU build); loading the inputs these tests build whole takes
# 4 to 10 GB.
MEMORY = 1024 * MiB


@dataclass
class Bounded:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def bounded_cli(*args, timeout: float = 60, memory: int = MEMORY, stdin=subprocess.DEVNULL,
                env: dict[str, str] | None = None, cwd=ROOT) -> Bounded:
    """`python -m alloctune ARGS` under RLIMIT_AS = `memory` (its children inherit it), `stdin` a file object (or
    DEVNULL); a run past `timeout` seconds fails the test."""
    env = dict(os.environ, **(env or {}), PYTHONPATH=str(ROOT))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    start = time.monotonic()
    try:
        run = subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], stdin=stdin, capture_output=True,
                             env=env, cwd=cwd, timeout=timeout, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"alloctune {' '.join(map(str, args))} ran past {timeout} s") from None
    return Bounded(run.returncode, run.stdout.decode(errors="replace"), run.stderr.decode(errors="replace"),
                   time.monotonic() - start)


def one_line_error(run: Bounded) -> str:
    """The run ended with exit 2 and one line on standard error, no traceback: that line."""
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr.startswith("alloctune: error: "), run.stderr
    return run.stderr
