"""Memory and time stay bounded by what alloctune needs, not by what a job or a user gives: a trial's stderr of
hundreds of megabytes and a printed line as long cost a few MiB; --repeats 1000000000 is one line, at once;
`diagnose` reads a log of any size from its end; an unreachable Ray address fails in seconds."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from clirun import ROOT, in_process

from alloctune.errors import AlloctuneError, OptionError
from alloctune.sweeper.options import SweepOptions

MiB = 2**20
OUTPUT_MIB = 256
GROWTH_MIB = 64   # what the parent may grow by while a job prints OUTPUT_MIB


def _peak_growth(code: str, *args) -> tuple[int, str]:
    """(how many MiB the peak memory of a fresh interpreter grew by while `code` ran, what it printed last)."""
    script = textwrap.dedent("""
        import resource, sys
        from alloctune.trial import launch, throughput   # imports before the baseline
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        """) + textwrap.dedent(code) + textwrap.dedent("""
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
        print(grown)
        print(repr(answer))
        """)
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert done.returncode == 0, done.stderr
    grown, answer = done.stdout.strip().splitlines()[-2:]
    return int(grown), answer


def test_a_trial_that_prints_hundreds_of_megabytes_to_stderr_keeps_its_tail_only(tmp_path):
    # the trial's interpreter: prints OUTPUT_MIB to stderr and exits 3 (a crash), whatever it is asked to run
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\nimport os, sys\nline = b'x' * {MiB} + b'\\n'\n"
                      f"for _ in range({OUTPUT_MIB}):\n    os.write(2, line)\nos.write(2, b'the last line\\n')\n"
                      "sys.exit(3)\n")
    python.chmod(0o755)
    grown, error = _peak_growth("""
        from alloctune.settings.conf import AllocConf
        from alloctune.trial.task import TrialTask
        from alloctune.workload.loader import load_workload
        spec = load_workload("workloads/transformer-varlen.yaml")
        task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.argv[1], "torch-test",
                         timeout_s=300)
        record = launch.run_trial(task)
        answer = (record.state.value, record.error.splitlines()[-1])
        """, python)
    assert error == repr(("crashed", "the last line"))
    assert grown < GROWTH_MIB, f"the parent grew by {grown} MiB for {OUTPUT_MIB} MiB of stderr"


def test_a_metric_regex_over_a_line_of_hundreds_of_megabytes_reads_it_in_pieces(tmp_path):
    out = tmp_path / "stdout"
    with open(out, "wb") as f:
        for _ in range(OUTPUT_MIB):
            f.write(b"y" * MiB)
        f.write(b"\nthroughput: 42\n")
    grown, answer = _peak_growth("answer = throughput.metric_values(sys.argv[1], r'throughput: (\\d+)')", out)
    assert answer == "[42.0]"
    assert grown < GROWTH_MIB, f"grew by {grown} MiB reading one line of {OUTPUT_MIB} MiB"


def test_a_billion_repeats_is_one_line_at_once_and_no_folder(tmp_path):
    started = time.monotonic()
    done = in_process("sweep", "--repeats", "1000000000", "--backend", "sim", "--results", tmp_path / "results",
                      ROOT / "workloads" / "transformer-varlen.yaml")
    assert time.monotonic() - started < 30
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "alloctune: error: --repeats must be 'confirm', 'auto' or a whole number from 1 to 1000, got 1000000000"]
    assert not (tmp_path / "results").exists()
    with pytest.raises(OptionError, match="max_repeats must be a whole number from 3 to 1000, got 1000000000"):
        SweepOptions(max_repeats=10**9)


def test_diagnose_reads_a_log_over_two_gib_from_its_end(tmp_path):
    message = (ROOT / "tests/fixtures/oom/h200/frag/oom-rank0.txt").read_bytes()
    log = tmp_path / "train.log"
    with open(log, "wb") as f:
        f.write(b"epoch 1 step 1 loss 2.3\n" * 5000)
        f.seek(3 * 2**30)   # a hole: the file takes no disk, its size is 3 GiB and more
        f.write(b"epoch 9 step 99 loss 0.1\n" + message)
    assert log.stat().st_size > 3 * 2**30
    done = in_process("diagnose", log)
    assert done.returncode == 0, done.stderr
    assert "fragment" in done.stdout.lower()


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("form", ["127.0.0.1:{}", "ray://127.0.0.1:{}"])
def test_an_unreachable_ray_address_fails_in_seconds_in_one_line(form):
    pytest.importorskip("ray")
    from alloctune.sweeper.executors.ray import RayExecutor

    address = form.format(_closed_port())
    started = time.monotonic()
    with pytest.raises(AlloctuneError) as caught:
        RayExecutor(address=address)
    assert time.monotonic() - started < 10
    assert str(caught.value).startswith(f"cannot connect to the Ray cluster at {address}: Connection refused")
    assert "\n" not in str(caught.value)
