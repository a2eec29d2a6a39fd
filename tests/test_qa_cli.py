"""Defects a new user hit on the committed results folders (copied) and the grid file, through the real CLI."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from clirun import ROOT, cli

VARLEN = ROOT / "results" / "transformer-varlen-h200-20261129-234646"


def test_report_refuses_a_hand_edited_max_slowdown_in_one_line(tmp_path):
    folder = Path(shutil.copytree(VARLEN, tmp_path / "r"))
    data = json.loads((folder / "sweep.json").read_text())
    data["max_slowdown"] = -1
    (folder / "sweep.json").write_text(json.dumps(data))
    r = cli("report", folder)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"alloctune: error: {folder / 'sweep.json'}: field 'max_slowdown': expected a fraction in [0, 1), got -1"]


def test_a_torn_last_trial_line_is_one_warning_line(tmp_path):
    folder = Path(shutil.copytree(VARLEN, tmp_path / "r"))
    with open(folder / "trials.jsonl", "a") as f:
        f.write('{"backend": "cu')   # killed mid-write
    r = cli("report", folder, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)
    assert r.stderr.strip().splitlines() == [
        f"alloctune: warning: {folder / 'trials.jsonl'}:22: ignoring a truncated last line"], r.stderr


def test_grid_dash_reads_stdin(tmp_path):
    out = tmp_path / "s"
    r = subprocess.run([sys.executable, "-m", "alloctune", "sweep", "workloads/detection.yaml", "--preset", "h200",
                        "--backend", "sim", "--grid", "-", "--out", str(out)], input="expandable_segments:True\n",
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "sweep.json").read_text())["grid"] == ["", "expandable_segments:True"]
