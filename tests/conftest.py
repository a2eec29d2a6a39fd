"""Fixtures shared by every test folder."""
from __future__ import annotations

import compileall
import os
from pathlib import Path

import pytest

# One intra-op thread for torch (OpenMP) and numpy (OpenBLAS) in this process and every process a test starts,
# unless the caller chose a number: `-n auto` runs one worker per core, and each worker's torch children would
# otherwise start a thread per core too. On a machine that is busy, torch's threads spin waiting for one another:
# examples/search_loop.py under the start-up hook, with another process on one of 2 cores, took 32 s of CPU, not
# 3.7 s. Nothing here measures a speed that depends on it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def no_visible_gpu(monkeypatch):
    """The no-GPU path on any machine, a GPU one included: no CUDA device for this test's child processes (the
    probe, trial children, the CLI run as a subprocess), which inherit this environment."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """`-n N` without `--dist` deals the tests out a file at a time (`--dist loadfile`), so that a module fixture (one
    local Ray, one set of replayed sweeps) is made once, on the one worker that runs its file. pytest-xdist's own
    default, `load`, deals them out test by test, and each worker would make it again; `loadgroup` does the same
    under pytest 9.2, where its groups are lost (pytest-dev/pytest-xdist#1386)."""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "loadfile"


def pytest_configure(config):
    """Byte-compile alloctune once for the run (in the controller, before any worker starts): the suite starts
    some thousand interpreters that import it, and under PYTHONDONTWRITEBYTECODE (set on this project's machines)
    none of them would write, so each compiled every module it imports again."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        compileall.compile_dir(Path(__file__).resolve().parents[1] / "alloctune", quiet=1)
