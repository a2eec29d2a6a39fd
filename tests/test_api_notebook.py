"""The Python API as a notebook calls it: there sys.stdout, sys.stderr and sys.stdin are objects without a file
descriptor (their fileno() raises io.UnsupportedOperation), none of them a terminal. Each test runs a fresh
interpreter whose streams are replaced so (`NOTEBOOK`), as a kernel has them before the first cell, and reads what
it reports on the real standard output."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from clirun import ROOT
from scaled import scaled_trace

import alloctune
from alloctune.sim.trace import save_trace

NOTEBOOK = ("import io, json, sys, alloctune\n"
            "sys.stdout, sys.stderr, sys.stdin = io.StringIO(), io.StringIO(), io.StringIO()\n")


def in_notebook(code: str, cwd) -> subprocess.CompletedProcess[str]:
    """`code` run after `NOTEBOOK` in a fresh interpreter in `cwd`; it reports on sys.__stdout__."""
    return subprocess.run([sys.executable, "-c", NOTEBOOK + code], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_standard_input_without_a_descriptor_is_refused_in_one_line(tmp_path):
    """'-' (standard input) where sys.stdin has no descriptor is the reader's one-line error that says so; it was
    "cannot read grid file -: fileno" for a notebook's sys.stdin, and an AttributeError where sys.stdin is None.
    The same replay from a path runs, and writes nothing to the notebook's streams (its progress is quiet)."""
    save_trace(scaled_trace(8), tmp_path / "8.xz")
    code = ("alloctune.replay('8.xz', ['default'])\nsaid = [sys.stdout.getvalue(), sys.stderr.getvalue()]\n"
            "for stdin in (sys.stdin, None):\n    sys.stdin = stdin\n"
            "    for call in (lambda: alloctune.replay('8.xz', grid='-'), lambda: alloctune.load_trace('-')):\n"
            "        try:\n            call()\n        except alloctune.AlloctuneError as exc:\n"
            "            said.append(str(exc))\n"
            "sys.__stdout__.write(json.dumps(said))\n")
    run = in_notebook(code, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    quiet_out, quiet_err, *refusals = json.loads(run.stdout)
    assert quiet_out == quiet_err == ""
    why = "'-' is standard input, which has no file descriptor here (a notebook's sys.stdin has none): give the path"
    assert refusals == [f"{why} of a grid file", f"{why} of a trace"] * 2


@pytest.mark.slow
def test_a_dry_run_from_python_whose_streams_have_no_descriptor_runs(tmp_path):
    """A notebook's sys.stdout and sys.stderr have no file descriptor: the job's output goes to descriptor 2, where
    handing the job sys.stderr raised `fileno` out of alloctune.sweep()."""
    (tmp_path / "job.py").write_text("import torch\nm = torch.nn.Linear(64, 64).cuda()\n"
                                     "for i in range(4):\n    m(torch.randn(8 * (i + 1), 64, device='cuda')).sum()\n")
    run = in_notebook(f"out = alloctune.sweep([{sys.executable!r}, 'job.py'], dry_run=True, results_root='res')\n"
                      "sys.__stdout__.write(type(out).__name__)\n", tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == "SweepOutcome"


def test_a_result_holding_a_trace_shows_its_counts_not_its_events(tmp_path):
    """A notebook shows the value of a cell's last line by its repr: a Trace's (and so a ReplayResult's or a
    Recording's, which hold theirs) was every event, megabytes of text for a real trace, which a notebook drops
    ('IOPub data rate exceeded') or hangs on."""
    trace = scaled_trace(8, steps=2000)
    save_trace(trace, tmp_path / "8.xz")
    loaded = alloctune.load_trace(tmp_path / "8.xz")
    assert repr(loaded) == (f"Trace(events={len(trace)}, allocs={loaded.num_allocs}, device=0, "
                            f"torch_version={loaded.meta.get('torch_version')!r})")
    assert len(repr(alloctune.replay(loaded, ["default"], jobs=1))) < 5000
