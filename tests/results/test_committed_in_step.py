"""The committed results folders (every results/**/choice.json) say what this checkout decides from their trials:
each one, copied to the same relative path under a scratch folder and reported there (`api.analyze.analyze`, as
`alloctune report` runs it), writes the summary.md and best.env the checkout holds, and a choice.json that says what
the committed one says: byte for byte as its own schema kept it (a file of schema 1 is never rewritten: it reads
through its upgrade, results/upgrade.py). A change to the decision or its words that moves them fails here until
`scripts/regenerate_results.py` regenerates them (and says which choices changed).

Each committed choice.json also reads through the upgrade as what it says: its keys give back the file (schema 1's
`repeats` aside, which it kept for the winner and the default together), and its decision is the one this checkout
takes again."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clirun import ROOT

from alloctune.results.choices import CHOICE_SCHEMA
from alloctune.results.folder import ResultsFolder
from alloctune.results.names import BEST_FILE, CHOICE_FILE, SUMMARY_FILE
from alloctune.results.upgrade import schema1, schema1_text
from alloctune.api.analyze import analyze

COMMITTED = sorted(p.parent.relative_to(ROOT) for p in (ROOT / "results").rglob(CHOICE_FILE))
COMPARED = (SUMMARY_FILE, BEST_FILE)


def _files(folder: Path) -> dict[str, str | None]:
    return {n: (folder / n).read_text(encoding="utf-8") if (folder / n).exists() else None for n in COMPARED}


def test_there_are_committed_folders():
    assert len(COMMITTED) > 10, COMMITTED


@pytest.mark.parametrize("folder", COMMITTED, ids=str)
def test_a_committed_folder_is_what_this_checkout_reports(folder, tmp_path, monkeypatch):
    committed = (ROOT / folder / CHOICE_FILE).read_text(encoding="utf-8")
    shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)   # best.env names the folder as given: relative, as it is named from the checkout
    # The plot is not compared (a PNG's bytes follow matplotlib's version) and drawing it takes nine tenths of a
    # report: an empty file stands in for it.
    monkeypatch.setattr("alloctune.report.plot.plot_pareto", lambda choices, path: Path(path).touch())
    analyze(folder)
    stale = f"{folder} is stale against this checkout: `python3 scripts/regenerate_results.py {folder}` regenerates it"
    assert _files(tmp_path / folder) == _files(ROOT / folder), stale
    written = tmp_path / folder / CHOICE_FILE
    assert json.loads(written.read_text(encoding="utf-8"))["schema"] == CHOICE_SCHEMA
    decided = ResultsFolder(tmp_path / folder).choices()
    assert (schema1_text(decided) if json.loads(committed)["schema"] == 1 else written.read_text()) == committed, stale
    # read, the committed file is the decision taken again, as far as its schema kept it, and stays as it was
    held = ResultsFolder(ROOT / folder).choices()
    assert [(c.conf, c.reasons, c.reasons_data, c.runners_up) for c in held] == \
        [(c.conf, c.reasons, c.reasons_data, c.runners_up) for c in decided]
    assert (ROOT / folder / CHOICE_FILE).read_text(encoding="utf-8") == committed


@pytest.mark.parametrize("folder", COMMITTED, ids=str)
def test_a_committed_choice_reads_through_its_upgrade_as_what_it_says(folder):
    path = ROOT / folder / CHOICE_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    held = ResultsFolder(ROOT / folder).choices()
    if data["schema"] == CHOICE_SCHEMA:
        return   # nothing to upgrade: the test above holds it to what this checkout writes
    assert data["schema"] == 1 and len(held) == len(data["choices"])
    for record, kept in zip(held, data["choices"]):
        assert {k: v for k, v in json.loads(json.dumps(schema1(record))).items() if k != "repeats"} == \
            {k: v for k, v in kept.items() if k != "repeats"}
        assert {s.conf for s in record.settings} == {c for c in (kept["conf"], "" if kept["baseline_state"] else None)
                                                    if c is not None}
        winner = record.winner
        assert (winner is None) == (kept["conf"] is None)
        if winner is not None:   # the winner's figures where they live now
            assert (winner.peak_reserved_bytes, winner.memory, winner.num_alloc_retries) == \
                (kept["peak_reserved_bytes"], kept["memory_bytes"], kept["num_alloc_retries"])
