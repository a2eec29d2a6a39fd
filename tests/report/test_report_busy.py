"""`alloctune report` on a folder another process writes (its writer lock held) says so in one line and changes
nothing: what the folder held and its new decision are read and written under that one lock."""
from __future__ import annotations

from clirun import in_process
from folders import make_folder, repeats

from alloctune.results.folder import ResultsFolder
from alloctune.api.analyze import analyze


def _files(folder: ResultsFolder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.path.iterdir()) if p.name != ".lock"}


def test_a_report_of_a_folder_being_written_is_one_line_and_changes_nothing(tmp_path):
    folder = make_folder(tmp_path / "r", repeats("") + repeats("expandable_segments:True", reserved=10.0))
    analyze(folder)
    before = _files(folder)
    with ResultsFolder(folder.path).lock():   # another writer: a second flock of the file, refused even here
        done = in_process("report", folder.path, "--max-slowdown", "0.5")
    assert done.returncode != 0 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("alloctune: error: ") and "is being written by another alloctune sweep or report" in line
    assert f"then `alloctune report {folder.path}` decides again" in line
    assert _files(folder) == before
