"""CI type-checks alloctune/ with mypy (configured in pyproject.toml's [tool.mypy])."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_over_alloctune():
    pytest.importorskip("mypy")
    done = subprocess.run([sys.executable, "-m", "mypy", "alloctune"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    errors = [line for line in done.stdout.splitlines() if re.match(r"[^:]+:\d+: error:", line)]
    assert not errors, "\n".join(errors)
    assert done.returncode == 0 and "error: " not in done.stderr, done.stdout + done.stderr
