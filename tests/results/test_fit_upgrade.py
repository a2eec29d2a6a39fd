"""fit.json of schema 1 read as schema 2 (results/fits.py `_upgrade_1`): schema 1 kept the peak reserved under the
limit as what an answer needed, schema 2 the least room it runs in, so an old answer's need and headroom are read as
unknown, not as the other figure; its answers, runs and copies read as written. Schema 2 read as schema 3
(`_upgrade_2`): an answer's basis in the vocabulary, the curve's part apart, no margin where nothing tested the curve,
and where the context came from. A schema it does not know: one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import alloctune
from alloctune.errors import ResultsError
from alloctune.results.fits import FIT_SCHEMA, UNTESTED, FitFile, OverheadFrom

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "fits"

OLD = ROOT / "results" / "h100-copies-2026-12-06" / "gpt2" / "fit.json"   # committed, schema 1


def test_a_schema_1_fit_reads_with_its_need_and_headroom_unknown_and_the_rest_as_written():
    data = json.loads(OLD.read_text())
    assert data["schema"] == 1 and any(a["need_bytes"] for limit in data["limits"] for a in limit["answers"])
    fit = FitFile.from_json(data, str(OLD))
    assert fit.schema == FIT_SCHEMA == 3
    for stored, limit in zip(data["limits"], fit.limits):
        for a, answer in zip(stored["answers"], limit.answers):
            assert (answer.need_bytes, answer.headroom_bytes) == (None, None)
            assert (answer.largest, answer.runs, answer.copies) == (a["largest"], a["runs"], a["copies"])
        assert len(limit.copies_confirmed) == len(stored["copies_confirmed"])


def as_schema_2(fit: FitFile, margin: float) -> dict:
    """`fit` as schema 2 wrote it: the curve's part in `basis`, a bare curve's error as its margin, and whether the
    recordings measured the context."""
    data = fit.to_json()
    for limit in data["limits"]:
        for a in limit["answers"]:
            a["basis"] = a.pop("curve") or (a["basis"] if a["largest"] is not None else None)
            a["margin"] = None if a.pop("margin_why") is None and a["margin"] is None else margin
    del data["overhead_from"]
    return dict(data, schema=2, overhead_measured=True)


def test_a_schema_2_fit_reads_in_the_vocabulary_with_no_margin_where_nothing_tested_the_curve():
    """Schema 2 said 'extrapolated' as an answer's basis where --json said 'predicted', a line's error at two values
    (2e-16) as its margin, and 'overhead_measured' of a dry run's table."""
    traces = {b: FIXTURES / f"gpt2-h100-batch-{b}.xz" for b in (2, 4)}
    fit = alloctune.fit("batch", traces=traces, confs=["default"], budgets=["20GiB"], jobs=1).fit
    data = as_schema_2(fit, 2e-16)
    [answer] = data["limits"][0]["answers"]
    assert (answer["basis"], answer["margin"]) == ("extrapolated", 2e-16)
    read = FitFile.from_json(data, "fit.json")
    [a] = read.limits[0].answers
    assert (a.basis, a.curve, a.margin, a.margin_why) == ("predicted", "extrapolated", None, UNTESTED)
    assert read.overhead_from is OverheadFrom.MEASURED and read.limits == fit.limits
    dry = dict(data, dry_run={"card": "NVIDIA H100 80GB HBM3", "arch": "sm90", "table": "torch 2.11 sm90",
                              "invented": 0, "invented_by_kind": {}, "unknown_workspaces": 0,
                              "reserved_up_to_bytes": None})
    assert FitFile.from_json(dry, "fit.json").overhead_from is OverheadFrom.TABLE


def test_a_schema_this_alloctune_does_not_know_is_one_line():
    data = dict(json.loads(OLD.read_text()), schema=4)
    with pytest.raises(ResultsError, match="schema 4 is not one this alloctune reads"):
        FitFile.from_json(data, str(OLD))
