"""Every command that prints, run where standard output and error are ASCII only (PYTHONIOENCODING=ascii, or the
C locale without UTF-8 mode), issue 29: no traceback on '·', '×' or '±' after the files were written; each glyph
is shown by its ASCII stand-in and the rest of the output is as it was."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from clirun import ROOT
from commands import NAMES, TRACE, every_command

ASCII_ONLY = {"PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
              "LC_ALL=C PYTHONUTF8=0": {"LC_ALL": "C", "PYTHONUTF8": "0"}}
# A stand-in each command's output holds where UTF-8 output holds the glyph ('·' between a table's title parts,
# '×' before compare's reserved/allocated ratio).
STAND_IN = {"report": " - torch-2.11.0 - measured", "compare": "x1.50"}


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    return every_command(tmp_path_factory.mktemp("ascii"))


def run_under(args, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_CTYPE", "LC_ALL")}
    return subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], capture_output=True, cwd=ROOT,
                          env=dict(base, **env, PYTHONPATH=str(ROOT)), timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("where", ASCII_ONLY)
@pytest.mark.parametrize("name", NAMES)
def test_every_command_prints_on_an_ascii_only_stream(commands, name, where):
    args, status = commands[name]
    run = run_under(args, ASCII_ONLY[where])
    assert run.returncode == status, run.stderr.decode(errors="replace")[-3000:]
    assert b"Traceback" not in run.stderr and b"UnicodeEncodeError" not in run.stderr
    out, err = run.stdout.decode("ascii"), run.stderr.decode("ascii")   # every glyph had its stand-in
    assert out or err
    if name in STAND_IN:
        assert STAND_IN[name] in out, out


def test_text_the_encoding_lacks_keeps_its_bytes(tmp_path):
    """A path beyond ASCII (here one that is not UTF-8 either) is printed as the file system has it."""
    trace = tmp_path / os.fsdecode(b"caf\xc3\xa9-\xff.xz")
    shutil.copy(TRACE, trace)
    run = run_under(["replay", trace, "--conf", "expandable_segments:True"], ASCII_ONLY["PYTHONIOENCODING=ascii"])
    assert run.returncode == 0 and b"caf\xc3\xa9-\xff.xz:" in run.stdout, run.stdout


def test_a_ratio_marked_against_its_medians_has_a_stand_in(tmp_path):
    """report's '0.93x†' (the medians beside it point the other way) reads '0.93x*' on an ASCII-only stream."""
    folder = shutil.copytree(ROOT / "results" / "transformer-varlen-h200-20261129-234646", tmp_path / "f")
    run = run_under(["report", folder], dict(ASCII_ONLY["PYTHONIOENCODING=ascii"], COLUMNS="120"))
    out = run.stdout.decode("ascii")
    assert run.returncode == 0 and "|0.93x* ~46.6% n.s. |" in out and "  * = the medians beside it" in out, out
