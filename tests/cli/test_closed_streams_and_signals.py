"""Every command with its standard output, error or input closed by the caller (`>&-`, `2>&-`, `<&-`), and the
commands that answer at the end stopped by SIGTERM (issue 19): they exit quietly with a status, never a traceback,
and say what an interruption means for them. Also a budget too small to be one."""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from bounded import bounded_cli, one_line_error
from clirun import ROOT
from commands import NAMES, PACKED, TRACE, every_command
from waiting import wait_until

from alloctune.sim.trace import Trace, save_trace

PIPE_READER_LEFT = 128 + signal.SIGPIPE
STOPPED = ("alloctune: terminated before it finished", "alloctune: terminated as it finished; what it printed is whole")


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    return every_command(tmp_path_factory.mktemp("closed"))


def run_with_closed(args, fds: tuple[int, ...]) -> subprocess.CompletedProcess:
    """The command with `fds` closed before it starts; its other streams captured."""
    def close() -> None:
        for fd in fds:
            os.close(fd)

    return subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], capture_output=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300, preexec_fn=close,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("name", NAMES)
def test_every_command_survives_a_closed_stdout_or_stderr(commands, name):
    args, status = commands[name]
    # stdout closed: what the command prints meets a pipe nobody reads, as with a reader that left
    run = run_with_closed(args, (1,))
    assert run.returncode == (PIPE_READER_LEFT if status == 0 else status), run.stderr
    assert b"Traceback" not in run.stderr and b"Exception ignored" not in run.stderr, run.stderr
    # stderr closed: the command does its work; the status says how it went
    run = run_with_closed(args, (2,))
    assert run.returncode == status and (status or run.stdout), run.stdout
    assert run.stderr == b""
    run = run_with_closed(args, (1, 2))
    assert run.returncode == (PIPE_READER_LEFT if status == 0 else status)


def test_a_command_that_prints_nothing_works_with_stdout_closed(commands, tmp_path):
    args, _ = commands["export"]
    run = run_with_closed([*args, "-o", tmp_path / "alloc.env"], (1,))
    assert run.returncode == 0 and b"wrote" in run.stderr, run.stderr
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in (tmp_path / "alloc.env").read_text()


def test_a_closed_stdin_reads_as_empty():
    for command in ("replay", "diagnose"):
        run = run_with_closed([command, "-"], (0,))
        assert run.returncode == 2 and b"'-' is empty" in run.stderr and b"Traceback" not in run.stderr


def slow_inputs(tmp_path) -> dict[str, list]:
    """Inputs that take several seconds to load and replay: a trace of 3 M events, a snapshot of 1 M entries."""
    n = 1_500_000
    trace = tmp_path / "long.xz"
    save_trace(Trace([0, 1] * n, [i for i in range(n) for _ in (0, 1)], [(i % 97 + 1) * 4096 for i in range(n)
                                                                           for _ in (0, 1)], [0] * (2 * n)), trace)
    entries = [{"action": a, "addr": i, "size": 512, "stream": 0} for i in range(500_000)
               for a in ("alloc", "free_completed")]
    snapshot = tmp_path / "long.pickle"
    snapshot.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries + [
        {"action": "oom", "size": 2**40, "device_free": 0, "stream": 0}]]}))
    return {"replay": ["replay", trace, "--min-memory"], "search": ["search", trace],
            "diagnose": ["diagnose", snapshot]}


def catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGTERM installed (Linux: the SigCgt mask of /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def test_sigterm_says_what_it_means_for_each_command(tmp_path):
    for name, args in slow_inputs(tmp_path).items():
        proc = subprocess.Popen([sys.executable, "-m", "alloctune", *map(str, args)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        # past the start-up (alloctune catches SIGTERM: its handler is installed), into the loading and replaying
        wait_until(lambda: proc.poll() is not None or catches_sigterm(proc.pid), 120, f"{name} handles SIGTERM")
        assert proc.poll() is None, (name, proc.communicate())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, (name, err)
        # (or, where the signal landed in code that swallowed it and the work ran to its end, that it finished)
        assert err.decode().strip().splitlines()[-1] in STOPPED, (name, err)
        assert b"resume" not in err and b"Traceback" not in err


def test_a_budget_fraction_too_small_to_be_one_is_refused(tmp_path):
    for args in (["sweep", PACKED, "--preset", "h200", "--backend", "sim", "--out", tmp_path / "run"],
                 ["replay", TRACE], ["search", TRACE]):
        error = one_line_error(bounded_cli(*args, "--budget", "1e-300", timeout=120))
        assert "a budget fraction of 1e-300 leaves less than 1 MiB even of a card with 1 TiB" in error
    assert not (tmp_path / "run").exists()


def test_no_export_hint_when_nothing_fits(tmp_path):
    run = bounded_cli("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--budget", "2e-6", "--conf",
                      "expandable_segments:True", "--out", tmp_path / "run", timeout=300)
    assert run.returncode == 0 and "nothing fits under" in run.stdout, run.stderr
    assert "Next: alloctune export" not in run.stdout and "best.env" not in run.stdout
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "nothing fits" in summary and "alloctune export" not in summary


def run_script(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_a_sigterm_landing_in_a_finalizer_still_stops_the_command():
    # The handler runs inside __del__, where Python swallows what it raises (as in an import's module-lock
    # callback, where a search once lost its SIGTERM): it must be raised again in the code that runs next.
    run = run_script("""
import os, signal, time
from alloctune.cli.main import Terminated, _Signals

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))

with _Signals() as signals:
    try:
        Dropped()
        end = time.monotonic() + 30
        while time.monotonic() < end:
            sum(range(1000))
        print("ran on")
    except Terminated:
        print("stopped", signals.terminated)
""")
    assert run.stdout == "stopped True\n" and "Traceback" not in run.stderr, run.stderr


def test_a_sigterm_lost_where_nothing_reports_it_still_sets_the_exit_status():
    # A subcommand (or a library under it) that swallows the interruption: the work ends, and the status says why.
    run = run_script("""
import os, signal, sys
import alloctune.cli.export as export
from alloctune.cli.main import main

def swallowing(args):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))
    except KeyboardInterrupt:
        pass
    print("the answer")
    return 0

export.run = swallowing
sys.exit(main(["export", "anywhere"]))
""")
    assert run.returncode == 128 + signal.SIGTERM and run.stdout == "the answer\n", run.stderr
    assert run.stderr == STOPPED[1] + "\n"
