"""Output into a pipe whose reader left (`alloctune replay T | head -n 3`): the command stops quietly, with the
status coreutils tools have then (141 = 128 + SIGPIPE), whether rich or print() was writing."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle"


@pytest.mark.parametrize("args", [("replay", SNAPSHOT),               # a rich table
                                  ("replay", SNAPSHOT, "--json"),     # print(), flushed at the end
                                  ("diagnose", SNAPSHOT)])            # print() of plain lines
def test_a_reader_that_left_ends_the_command_quietly(args):
    proc = subprocess.Popen([sys.executable, "-m", "alloctune", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()   # before the command writes a line: its first write meets a pipe nobody reads
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 128 + signal.SIGPIPE, err
    assert "Broken pipe" not in err and "Exception ignored" not in err and "Traceback" not in err, err
