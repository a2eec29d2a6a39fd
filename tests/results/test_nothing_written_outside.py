"""No file outside the results folder is ever written (issue 19): links in a folder are replaced, not written
through (reports) or refused (the trials, the lock); a user's own folder given as --out is refused before anything
is written in it; a full disk leaves no temporary file and the old file whole; a folder whose path is not UTF-8
gets whole reports."""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import ROOT, in_process
from folders import choice, make_folder, repeats

PACKED = ROOT / "workloads" / "transformer-packed.yaml"
SWEEP = ["sweep", PACKED, "--preset", "h200", "--backend", "sim", "--conf", "expandable_segments:True"]
REPORTS = ("best.env", "summary.md", "plot.png")


def finished(path):
    return make_folder(path, repeats("") + repeats("expandable_segments:True", reserved=10.0),
                       [choice("expandable_segments:True")])


def link_reports_outside(folder: Path, outside: Path) -> dict[Path, bytes]:
    """Each report of `folder` made a link to a file of the user's outside it; what those files hold."""
    outside.mkdir(exist_ok=True)
    kept = {}
    for name in REPORTS:
        target = outside / f"precious-{name}"
        target.write_bytes(f"the user's own {name}\n".encode())
        kept[target] = target.read_bytes()
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(target)
    return kept


def assert_replaced(folder: Path, kept: dict[Path, bytes], stderr: str) -> None:
    for target, content in kept.items():
        assert target.read_bytes() == content, target   # untouched
    for name in REPORTS:
        assert (folder / name).is_file() and not (folder / name).is_symlink(), name
        assert f"{folder / name} was a symbolic link to" in stderr and "replaced it with the file itself" in stderr
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_report_replaces_links_to_files_outside_the_folder(tmp_path):
    folder = finished(tmp_path / "w-1").path
    kept = link_reports_outside(folder, tmp_path / "home")
    run = in_process("report", folder)
    assert run.returncode == 0, run.stderr
    assert_replaced(folder, kept, run.stderr)
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in (folder / "best.env").read_text()


@pytest.fixture(scope="module")
def swept_into_empty(tmp_path_factory):
    """(the run, the folder) of one sweep given an empty folder of the user's as --out; the test that resumes a
    sweep works on a copy of it."""
    empty = tmp_path_factory.mktemp("empty")
    return in_process(*SWEEP, "--out", empty), empty


def test_a_resumed_sweep_replaces_links_and_refuses_a_linked_trials_file_or_lock(swept_into_empty, tmp_path):
    first, swept = swept_into_empty
    assert first.returncode == 0, first.stderr
    out = Path(shutil.copytree(swept, tmp_path / "run"))
    kept = link_reports_outside(out, tmp_path / "home")
    again = in_process(*SWEEP, "--out", out)
    assert again.returncode == 0 and "Resuming the sweep" in again.stderr, again.stderr
    assert_replaced(out, kept, again.stderr)
    assert not (out / ".lock").exists()   # a lock exists only while it is held
    for name in ("trials.jsonl", ".lock"):   # data and a lock alloctune writes into: refused, not replaced
        target = tmp_path / "home" / f"precious-{name}"
        if name == ".lock":
            (out / name).write_text("1\n")
        (out / name).rename(target)
        (out / name).symlink_to(target)
        if name == "trials.jsonl":   # one trial left to run again, so the resumed sweep appends
            target.write_bytes(target.read_bytes().splitlines(keepends=True)[0])
        before = target.read_bytes()
        run = in_process(*SWEEP, "--out", out) if name == "trials.jsonl" else in_process("report", out)
        assert run.returncode == 2 and f"{out / name} is a symbolic link" in run.stderr, run.stderr
        assert "Traceback" not in run.stderr and target.read_bytes() == before
        (out / name).unlink()
        target.rename(out / name)


def test_out_into_a_users_own_folder_is_refused_before_anything_is_written(swept_into_empty, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md").write_text("my notes\n")
    (mine / "best.env").write_text("MY=1\n")
    (mine / "trials.jsonl").write_text("{damaged\n")
    before = {p.name: p.read_bytes() for p in mine.iterdir()}
    run = in_process(*SWEEP, "--out", mine)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert "holds best.env, summary.md, trials.jsonl and no sweep (no sweep.json)" in run.stderr
    assert {p.name: p.read_bytes() for p in mine.iterdir()} == before   # no sweep.json, no .lock
    run, empty = swept_into_empty
    assert run.returncode == 0 and (empty / "summary.md").is_file(), run.stderr


def _small_files() -> None:
    """preexec_fn: files may grow to 1 KiB only, as on a full disk (a write past it fails with EFBIG; Python
    ignores SIGXFSZ, so the process is not killed)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


def test_a_full_disk_leaves_the_old_file_whole_and_no_temporary_file(tmp_path):
    folder = finished(tmp_path / "w-1").path
    before = (folder / "choice.json").read_bytes()
    assert len(before) > 1024
    run = subprocess.run([sys.executable, "-m", "alloctune", "report", str(folder), "--max-slowdown", "0.05"],
                         capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         timeout=300, preexec_fn=_small_files)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert "File too large" in run.stderr
    assert (folder / "choice.json").read_bytes() == before
    assert sorted(p.name for p in folder.iterdir() if "tmp" in p.name) == []


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses names that are not UTF-8")
def test_a_folder_whose_name_is_not_utf8_gets_whole_reports(tmp_path):
    out = os.fsencode(tmp_path) + b"/run-\xff"
    run = subprocess.run([sys.executable, "-m", "alloctune", *map(str, SWEEP), "--out", out], capture_output=True,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8"), timeout=300)
    assert run.returncode == 0, run.stderr.decode(errors="replace")
    summary = (Path(os.fsdecode(out)) / "summary.md").read_bytes()
    assert summary.startswith(b"# alloctune: transformer-packed") and b"## How this was measured" in summary
    assert b"run-\xff" in summary   # the folder's name as the file system has it
    assert b"run-\xff" in run.stdout
