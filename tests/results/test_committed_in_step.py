"""The committed results folders (every results/**/choice.json) say what this checkout decides from their trials:
each one, copied to the same relative path under a scratch folder and reported there (`api.analyze.analyze`, as
`alloctune report` runs it), writes the choice.json, summary.md and best.env the checkout holds. A change to the
decision or its words that moves them fails here until `scripts/regenerate_results.py` regenerates them (and says
which choices changed)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from clirun import ROOT

from alloctune.results.names import BEST_FILE, CHOICE_FILE, SUMMARY_FILE
from alloctune.api.analyze import analyze

COMMITTED = sorted(p.parent.relative_to(ROOT) for p in (ROOT / "results").rglob(CHOICE_FILE))
COMPARED = (CHOICE_FILE, SUMMARY_FILE, BEST_FILE)


def _files(folder: Path) -> dict[str, str | None]:
    return {n: (folder / n).read_text(encoding="utf-8") if (folder / n).exists() else None for n in COMPARED}


def test_there_are_committed_folders():
    assert len(COMMITTED) > 10, COMMITTED


@pytest.mark.parametrize("folder", COMMITTED, ids=str)
def test_a_committed_folder_is_what_this_checkout_reports(folder, tmp_path, monkeypatch):
    shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)   # best.env names the folder as given: relative, as it is named from the checkout
    # The plot is not compared (a PNG's bytes follow matplotlib's version) and drawing it takes nine tenths of a
    # report: an empty file stands in for it.
    monkeypatch.setattr("alloctune.report.plot.plot_pareto", lambda settings, choices, path: Path(path).touch())
    analyze(folder)
    assert _files(tmp_path / folder) == _files(ROOT / folder), (
        f"{folder} is stale against this checkout: `python3 scripts/regenerate_results.py {folder}` regenerates it")
