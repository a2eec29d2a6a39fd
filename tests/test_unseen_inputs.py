"""Inputs a new user brings that the tool had not seen: stdin for every trace, OOM messages as real logs show
them (colours, wrappers, other backends; tests/fixtures/oom/public/SOURCES.md has their origin), and snapshot
pickles as other torch versions write them. Each is read, or refused in one line with exit 2."""
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

from alloctune.diagnosis import diagnose

ROOT = Path(__file__).resolve().parent.parent

H200 = ROOT / "tests" / "fixtures" / "oom" / "h200"
PUBLIC = ROOT / "tests" / "fixtures" / "oom" / "public"


def cli(*args, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """`python -m alloctune ARGS` from this checkout, with `stdin` as its standard input."""
    run = subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], input=stdin, capture_output=True,
                         cwd=ROOT, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return subprocess.CompletedProcess(run.args, run.returncode, run.stdout.decode(), run.stderr.decode())


def _one_line_error(run) -> str:
    assert run.returncode == 2 and not run.stdout, run
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    return run.stderr


def test_replay_reads_a_trace_from_stdin():
    run = cli("replay", "-", "--conf", "expandable_segments:True", "--json",
              stdin=(H200 / "frag" / "oom-rank0.pickle").read_bytes())
    assert run.returncode == 0, run.stderr
    rows = {row["conf"]: row for row in json.loads(run.stdout)}
    assert rows["expandable_segments:True"]["peak_reserved_bytes"] > 0


def test_an_empty_stdin_is_named_as_such():
    for command in ("replay", "search"):
        error = _one_line_error(cli(command, "-"))
        assert "'-' is empty" in error and "alloctune-trace-" not in error
    assert "once" in _one_line_error(cli("replay", "-", "-"))
