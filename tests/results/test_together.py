"""A decision's files (choice.json, summary.md, plot.png, best.env) change together or not at all: a real
`alloctune report` killed at every rename it makes, and at random moments, leaves a folder whose files are the old
set or the new one, whole, once the next reader or writer has settled it; nothing staged is left behind."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from clirun import ROOT
from folders import make_folder, repeats

from alloctune.errors import FolderBusy
from alloctune.api.analyze import analyze
from alloctune.results.names import PENDING_FILE
from alloctune.results.folder import ResultsFolder

FILES = ("choice.json", "summary.md", "plot.png", "best.env")
OLD, NEW = 0.02, 0.5   # --max-slowdown: the default, and expandable_segments (20% slower, a third less memory)

# `alloctune report FOLDER --max-slowdown X` in a process that dies (SIGKILL) at its N-th os.replace: each file
# written whole, the marker, and each rename into place are one os.replace apiece.
DIE_AT_RENAME = """
import os, signal, sys
folder, slowdown, die_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
real, calls = os.replace, [0]
def replace(a, b):
    if calls[0] == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    calls[0] += 1
    real(a, b)
os.replace = replace
from alloctune.cli.main import main
sys.exit(main(["report", folder, "--max-slowdown", slowdown]))
"""


def _files(folder: ResultsFolder) -> dict[str, bytes | None]:
    return {n: (folder.path / n).read_bytes() if (folder.path / n).exists() else None for n in FILES}


@pytest.fixture
def sets(tmp_path):
    """A folder, and its files as a report decides them under each max slowdown (the folder left at OLD)."""
    folder = make_folder(tmp_path / "r", repeats("") + repeats("expandable_segments:True", tputs=(80.0, 81.0, 79.0),
                                                               reserved=10.0))
    analyze(folder, max_slowdown=NEW)
    new = _files(folder)
    analyze(folder, max_slowdown=OLD)
    old = _files(folder)
    assert old != new and all(old[n] != new[n] for n in FILES)   # every file tells the two apart
    return folder, old, new


def _settled(folder: ResultsFolder) -> dict[str, bytes | None]:
    """The folder as the next reader finds it (`choices()` finishes a committed batch first), which the next
    writer leaves as it is, with nothing staged left."""
    ResultsFolder(folder.path).choices()
    seen = _files(folder)
    writer = ResultsFolder(folder.path)
    with writer.lock():
        writer.settle()
    assert not [p for p in os.listdir(folder.path) if p.endswith(".staged") or p == PENDING_FILE]
    assert _files(folder) == seen
    return seen


def _report(folder, slowdown, die_at=None) -> subprocess.Popen:
    code = DIE_AT_RENAME if die_at is not None else \
        "import sys; from alloctune.cli.main import main; sys.exit(main(sys.argv[1:]))"
    args = [folder.path, slowdown, die_at] if die_at is not None else ["report", folder.path, "--max-slowdown",
                                                                        slowdown]
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_a_report_killed_at_any_rename_leaves_the_old_set_or_the_new_one(sets):
    folder, old, new = sets
    seen = set()
    for die_at in range(40):
        run = _report(folder, NEW, die_at)
        _, err = run.communicate(timeout=120)
        finished = run.returncode == 0
        now = _settled(folder)
        assert now in (old, new), f"killed at rename {die_at}: a mixed set"
        seen.add("new" if now == new else "old")
        if finished:
            assert now == new and die_at > len(FILES), err
            break
        assert run.returncode == -signal.SIGKILL, err
        analyze(folder, max_slowdown=OLD)   # back to the old set for the next kill
    else:
        pytest.fail("the report never finished")
    assert seen == {"old", "new"}   # some kills came before the commit point, some after it


def test_a_report_killed_at_random_moments_leaves_a_whole_set(sets):
    folder, old, new = sets
    rng, deadline, kills = random.Random(29), time.monotonic() + 8, 0
    target = NEW
    while time.monotonic() < deadline or kills < 3:
        run = _report(folder, target)
        time.sleep(rng.uniform(0.5, 3.0))
        run.send_signal(rng.choice([signal.SIGKILL, signal.SIGTERM, signal.SIGINT]))
        run.communicate(timeout=60)
        kills += 1
        now = _settled(folder)
        assert now in (old, new), f"kill {kills}: a mixed set"
        target = OLD if now == new else NEW


def test_a_reader_waits_for_no_half_written_set_while_a_writer_holds_the_folder(sets):
    folder, old, _ = sets
    (folder.path / PENDING_FILE).write_text('{"written": ["choice.json"], "removed": []}')
    with ResultsFolder(folder.path).lock():
        with pytest.raises(FolderBusy):
            ResultsFolder(folder.path).choices()
    assert _settled(folder) == old   # nothing staged: the marker's renames are done already


def test_a_marker_naming_a_path_outside_the_folder_is_refused(sets):
    folder, old, _ = sets
    (folder.path / PENDING_FILE).write_text('{"written": ["../x"], "removed": ["/etc/passwd"]}')
    with pytest.raises(Exception, match="expected a file name"):
        ResultsFolder(folder.path).choices()
    assert _files(folder) == old
