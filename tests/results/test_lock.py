"""A results folder's writer lock leaves no litter: its file exists only while a sweep or report holds it (one an
older alloctune left is taken and removed too), and removing it as it is let go keeps the lock exclusive: writers
that race for it, each taking it as the last lets go, never hold it at once."""
from __future__ import annotations

import os
import subprocess
import sys

from clirun import ROOT, in_process
from folders import make_folder, repeats

from alloctune.results.folder import LOCK_FILE, ResultsFolder

# A writer that takes the lock `rounds` times, each time adding one to the count in the folder's file `count` by a
# read and a later write: two holders at once would lose an addition.
RACER = """
import sys
from alloctune.errors import FolderBusy
from alloctune.results.folder import ResultsFolder
folder, rounds = ResultsFolder(sys.argv[1]), int(sys.argv[2])
count = folder.path / "count"
for _ in range(rounds):
    while True:
        try:
            with folder.lock():
                seen = int(count.read_text())
                for _ in range(200):   # widen the window between the read and the write
                    pass
                count.write_text(str(seen + 1))
            break
        except FolderBusy:
            continue
"""


def test_a_report_leaves_no_lock_file_and_takes_away_an_old_one(tmp_path):
    folder = make_folder(tmp_path / "r", repeats("") + repeats("expandable_segments:True", reserved=10.0))
    for before in (None, b"4242"):   # none, then one an older alloctune left behind
        if before is not None:
            (folder.path / LOCK_FILE).write_bytes(before)
        run = in_process("report", folder.path)
        assert run.returncode == 0, run.stderr
        assert LOCK_FILE not in os.listdir(folder.path)


def test_writers_racing_for_the_lock_never_hold_it_at_once(tmp_path):
    folder = ResultsFolder(tmp_path / "r")
    folder.path.mkdir()
    (folder.path / "count").write_text("0")
    rounds, writers = 300, 3
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    racing = [subprocess.Popen([sys.executable, "-c", RACER, str(folder.path), str(rounds)], env=env,
                               stderr=subprocess.PIPE) for _ in range(writers)]
    for racer in racing:
        _, err = racer.communicate(timeout=300)
        assert racer.returncode == 0, err
    assert (folder.path / "count").read_text() == str(rounds * writers)
    assert LOCK_FILE not in os.listdir(folder.path)
