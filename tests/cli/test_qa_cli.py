"""Defects a new user hit on the committed results folders (copied) and the grid file, through the real CLI."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clirun import ROOT, cli, in_process

VARLEN = ROOT / "results" / "transformer-varlen-h200-20261129-234646"


def test_report_refuses_a_hand_edited_max_slowdown_in_one_line(tmp_path):
    folder = Path(shutil.copytree(VARLEN, tmp_path / "r"))
    data = json.loads((folder / "sweep.json").read_text())
    data["max_slowdown"] = -1
    (folder / "sweep.json").write_text(json.dumps(data))
    r = in_process("report", folder)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"alloctune: error: {folder / 'sweep.json'}: field 'max_slowdown': expected a fraction in [0, 1), got -1"]


def test_a_torn_last_trial_line_is_one_warning_line(tmp_path):
    folder = Path(shutil.copytree(VARLEN, tmp_path / "r"))
    with open(folder / "trials.jsonl", "a") as f:
        f.write('{"backend": "cu')   # killed mid-write
    r = in_process("report", folder, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)
    assert r.stderr.strip().splitlines() == [
        f"alloctune: warning: {folder / 'trials.jsonl'}:22: ignoring a truncated last line"], r.stderr


@pytest.mark.slow
def test_grid_dash_reads_stdin(tmp_path):
    out = tmp_path / "s"
    r = in_process("sweep", "workloads/detection.yaml", "--preset", "h200", "--backend", "sim", "--grid", "-", "--out",
                   out, stdin="expandable_segments:True\n")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "sweep.json").read_text())["grid"] == ["", "expandable_segments:True"]


@pytest.mark.slow
def test_sweep_dash_reads_the_workload_from_stdin_with_paths_relative_to_here(tmp_path):
    text = (ROOT / "workloads" / "detection.yaml").read_text()   # its trace: traces/detection-h200.xz
    out = tmp_path / "s"
    r = in_process("sweep", "-", "--preset", "h200", "--backend", "sim", "--conf", "expandable_segments:True", "--out",
                   out, stdin=text, cwd=ROOT / "workloads")
    assert r.returncode == 0, r.stderr
    info = json.loads((out / "sweep.json").read_text())
    assert info["workload_name"] == "detection" and info["trace"]["path"] == str(ROOT / "workloads" / "traces" /
                                                                                "detection-h200.xz")
    elsewhere = in_process("sweep", "-", "--preset", "h200", "--backend", "sim", "--out", tmp_path / "t", stdin=text,
                           cwd=tmp_path)
    assert elsewhere.returncode == 2 and not (tmp_path / "t").exists()
    assert elsewhere.stderr.strip().splitlines() == [
        f"alloctune: error: <stdin>: key 'presets.h200.trace': expected an existing trace file, "
        f"{tmp_path / 'traces' / 'detection-h200.xz'} does not exist"]
    both = in_process("sweep", "-", "--grid", "-", stdin=text)
    assert both.returncode == 2 and both.stderr.strip().splitlines() == [
        "alloctune: error: the workload and --grid cannot both come from standard input: give one as a file"]


def _edit(path: Path, change, line: int | None = None) -> None:
    """Hand-edit a JSON file, or one line (1-based) of a JSON-lines file, through `change(data)`."""
    if line is None:
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
        return
    lines = path.read_text().splitlines(keepends=True)
    record = json.loads(lines[line - 1])
    change(record)
    lines[line - 1] = json.dumps(record) + "\n"
    path.write_text("".join(lines))


def _choice(key: str, value):
    return lambda data: data["choices"][0].__setitem__(key, value)


@pytest.mark.parametrize("conf, problem", [
    ("foo:bar", "torch 2.11 does not know the key 'foo'"),
    ("expandable_segments:maybe",
     "expandable_segments expects 'True' or 'False' (capitalised, as PyTorch requires), got 'maybe'")])
def test_export_refuses_a_hand_edited_setting_naming_file_and_field(tmp_path, conf, problem):
    folder = Path(shutil.copytree(VARLEN, tmp_path / "r"))
    _edit(folder / "choice.json", _choice("conf", conf))
    r = cli("export", folder)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.strip().splitlines() == [
        f"alloctune: error: {folder / 'choice.json'}: field 'choices[0].conf': {problem}"]


def _measured(key: str, value):
    return lambda record: record["measurement"].__setitem__(key, value)


@pytest.mark.parametrize("file, line, change, field, problem", [
    ("trials.jsonl", 3, lambda r: r.__setitem__("conf", "max_split_size_mb:lots"), "conf",
     "max_split_size_mb expects a whole number of MiB, got 'lots'"),
    ("trials.jsonl", 2, _measured("peak_reserved_bytes", -1), "measurement.peak_reserved_bytes",
     "expected a byte count from 0 to 1.15292e+18, got -1"),
    ("trials.jsonl", 2, _measured("throughput", -5.0), "measurement.throughput",
     "expected a rate from 0 to 1e+18, got -5.0"),
    ("trials.jsonl", 4, lambda r: r.__setitem__("repeat", -1), "repeat", "expected a count from 0 to 9.0072e+15, got -1"),
    ("trials.jsonl", 4, lambda r: r.__setitem__("budget_bytes", 0), "budget_bytes",
     "expected a budget in bytes from 1 to 1.15292e+18, got 0"),
    ("choice.json", None, _choice("repeats", -3), "choices[0].repeats",
     "expected a count from 0 to 9.0072e+15, got -3"),
    ("choice.json", None, _choice("peak_reserved_bytes", -8), "choices[0].peak_reserved_bytes",
     "expected a byte count from 0 to 1.15292e+18, got -8"),
])
def test_impossible_figures_are_one_line_naming_file_line_and_field(tmp_path, file, line, change, field, problem):
    folder = Path(shutil.copytree(VARLEN, tmp_path / "r"))
    _edit(folder / file, change, line)
    # report reads the trials; export reads choice.json as the sweep left it
    r = in_process("report" if file == "trials.jsonl" else "export", folder)
    where = f"{folder / file}" + (f":{line}" if line else "")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [f"alloctune: error: {where}: field {field!r}: {problem}"]


@pytest.mark.slow
def test_a_sim_sweep_says_each_skip_once_and_a_resumed_one_counts_what_is_done(tmp_path):
    out = tmp_path / "s"
    args = ("sweep", "workloads/detection.yaml", "--preset", "h200", "--backend", "sim", "--out", out)
    first = in_process(*args)
    assert first.returncode == 0, first.stderr
    assert (first.stdout + first.stderr).count("cudaMallocAsync") == 1, first.stdout + first.stderr
    assert "  needs no alloc retries, like the default" in first.stdout
    again = in_process(*args)   # resumes: nothing left to replay, the skipped setting is not counted
    replayed = len((out / "trials.jsonl").read_text().splitlines())
    assert again.returncode == 0 and f"{replayed}/{replayed}" in again.stderr, again.stderr
