"""A decision's files (choice.json, summary.md, plot.png, best.env) change together or not at all: a real
`alloctune report` killed at every rename it makes, and at random moments, leaves a folder whose files are the old
set or the new one, whole, once the next writer has settled it; nothing staged is left behind. A reader changes
nothing, and a marker the folder cannot account for (planted, damaged, or naming files a batch never changes) is
dropped with a warning, nothing it names removed."""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from clirun import ROOT, in_process
from folders import make_folder, repeats

from alloctune.api.analyze import analyze
from alloctune.results.names import PENDING_FILE
from alloctune.results.folder import ResultsFolder

CALIBRATION = ROOT / "tests" / "fixtures" / "calibration" / "h200-torch2.11.json"
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


def _everything(folder: ResultsFolder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.path.iterdir())}


def _settled(folder: ResultsFolder) -> dict[str, bytes | None]:
    """The folder as the next writer leaves it (`settle` finishes a committed batch), with nothing staged left;
    a reader before it changes nothing."""
    before = _everything(folder)
    ResultsFolder(folder.path).choices()
    assert _everything(folder) == before
    writer = ResultsFolder(folder.path)
    with writer.lock():
        writer.settle()
    assert not [p for p in os.listdir(folder.path) if p.endswith(".staged") or p in (PENDING_FILE, ".lock")]
    return _files(folder)


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


def _commit_by_hand(folder: ResultsFolder, name: str, content: bytes) -> None:
    """A batch of one file committed and not yet renamed, as a writer killed after its commit point leaves it."""
    staged = folder.path / f".{name}.staged"
    staged.write_bytes(content)
    digest = hashlib.sha256(content).hexdigest()
    (folder.path / PENDING_FILE).write_text(json.dumps({"written": [{"name": name, "sha256": digest}],
                                                        "removed": ["best.env"]}))


def test_a_reader_changes_nothing_and_the_next_writer_finishes_the_batch(sets):
    folder, old, new = sets
    _commit_by_hand(folder, "choice.json", new["choice.json"])
    before = _everything(folder)
    with ResultsFolder(folder.path).lock():   # another writer holds it: a reader still reads, changing nothing
        held = ResultsFolder(folder.path).choices()
    assert _everything(folder) == before and held == ResultsFolder(folder.path).choices()
    assert _settled(folder) == dict(old, **{"choice.json": new["choice.json"], "best.env": None})


@pytest.mark.parametrize("marker", [
    {"written": ["choice.json"], "removed": []},                                  # an older marker: no digests
    {"written": [{"name": "../x", "sha256": "0" * 64}], "removed": ["/etc/passwd"]},
    {"written": [], "removed": ["trials.jsonl", "calibration.json"]},
    {"written": [], "removed": ["best.env"]},                                     # writes nothing: no batch's
    {"written": [{"name": "choice.json", "sha256": "0" * 64}], "removed": ["best.env"]},   # not as it wrote it
    "{damaged",
])
def test_a_marker_the_folder_cannot_account_for_is_dropped_changing_nothing_it_names(sets, marker):
    folder, old, _ = sets
    shutil.copy(CALIBRATION, folder.path / "calibration.json")
    (folder.path / PENDING_FILE).write_text(marker if isinstance(marker, str) else json.dumps(marker))
    kept = {name: data for name, data in _everything(folder).items() if name != PENDING_FILE}
    writer = ResultsFolder(folder.path)
    with writer.lock(), pytest.warns(UserWarning, match=f"{PENDING_FILE}: dropped, changing nothing it names"):
        writer.settle()
    assert _everything(folder) == kept


def test_read_only_commands_change_nothing_and_a_report_drops_a_planted_marker(sets, tmp_path):
    folder, old, _ = sets
    shutil.copy(CALIBRATION, folder.path / "calibration.json")
    (folder.path / PENDING_FILE).write_text('{"written": [], "removed": ["trials.jsonl", "calibration.json"]}')
    before = _everything(folder)
    for args in (["export", folder.path], ["compare", folder.path, folder.path, "-o", tmp_path / "c"],
                 ["export", folder.path, "--format", "json", "-o", tmp_path / "x.json"]):
        run = in_process(*args)
        assert run.returncode == 0, run.stderr
        assert _everything(folder) == before, args
    run = in_process("report", folder.path, "--max-slowdown", str(OLD))
    assert run.returncode == 0 and f"{PENDING_FILE}: dropped, changing nothing it names" in run.stderr, run.stderr
    after = _everything(folder)
    assert PENDING_FILE not in after and ".lock" not in after
    assert {n: after[n] for n in ("trials.jsonl", "calibration.json", "sweep.json")} == \
        {n: before[n] for n in ("trials.jsonl", "calibration.json", "sweep.json")}
    assert _files(folder) == old


@pytest.mark.parametrize("trials", [None, b"", b"\n\n"])
def test_a_report_without_trials_is_one_line_and_changes_nothing(sets, trials):
    folder, _, _ = sets
    if trials is None:
        (folder.path / "trials.jsonl").unlink()
    else:
        (folder.path / "trials.jsonl").write_bytes(trials)
    before = _everything(folder)
    run = in_process("report", folder.path)
    state = "missing" if trials is None else "empty"
    assert run.returncode == 2 and run.stderr == (f"alloctune: error: {folder.path / 'trials.jsonl'} is {state}: no "
                                                  f"trial to decide from; nothing was changed\n"), run.stderr
    assert _everything(folder) == before
