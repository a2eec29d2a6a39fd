"""fit.json of schema 1 read as schema 2 (results/fits.py `_upgrade_1`): schema 1 kept the peak reserved under the
limit as what an answer needed, schema 2 the least room it runs in, so an old answer's need and headroom are read as
unknown, not as the other figure; its answers, runs and copies read as written. A schema it does not know: one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alloctune.errors import ResultsError
from alloctune.results.fits import FIT_SCHEMA, FitFile
ROOT = Path(__file__).resolve().parents[2]

OLD = ROOT / "results" / "h100-copies-2026-12-06" / "gpt2" / "fit.json"   # committed, schema 1


def test_a_schema_1_fit_reads_with_its_need_and_headroom_unknown_and_the_rest_as_written():
    data = json.loads(OLD.read_text())
    assert data["schema"] == 1 and any(a["need_bytes"] for limit in data["limits"] for a in limit["answers"])
    fit = FitFile.from_json(data, str(OLD))
    assert fit.schema == FIT_SCHEMA == 2
    for stored, limit in zip(data["limits"], fit.limits):
        for a, answer in zip(stored["answers"], limit.answers):
            assert (answer.need_bytes, answer.headroom_bytes) == (None, None)
            assert (answer.largest, answer.runs, answer.copies) == (a["largest"], a["runs"], a["copies"])
        assert len(limit.copies_confirmed) == len(stored["copies_confirmed"])


def test_a_schema_this_alloctune_does_not_know_is_one_line():
    data = dict(json.loads(OLD.read_text()), schema=3)
    with pytest.raises(ResultsError, match="schema 3 is not one this alloctune reads"):
        FitFile.from_json(data, str(OLD))
