"""choice.json of schema 1 reads through its upgrade (results/upgrade.py): as what it said, never rewritten by
reading, damage in it one line naming the file and the field as the file spells it, a version this alloctune does not
know refused; and `--json`'s schema 1 keys are the values a file of schema 1 held."""
from __future__ import annotations

import json

import pytest
from folders import make_folder, repeats

from alloctune.api.analyze import analyze
from alloctune.errors import ResultsError
from alloctune.results.choices import CHOICE_SCHEMA
from alloctune.results.figures import MemoryMeasure, SettingState
from alloctune.results.folder import ResultsFolder
from alloctune.results.names import CHOICE_FILE
from alloctune.results.upgrade import schema1, schema1_text
from alloctune.units import GiB

ES = "expandable_segments:True"


@pytest.fixture
def old(tmp_path):
    """A decided folder whose choice.json is what schema 1 wrote for the same decision; its schema 1 text."""
    folder = make_folder(tmp_path / "r", repeats("") + repeats(ES, reserved=10.0, tputs=(100.5, 101.0, 99.5)))
    analyze(folder)
    text = schema1_text(folder.choices())
    (folder.path / CHOICE_FILE).write_text(text)
    return folder, text


def _damaged(folder, text, key, value):
    data = json.loads(text)
    data["choices"][0][key] = value
    (folder.path / CHOICE_FILE).write_text(json.dumps(data))
    with pytest.raises(ResultsError) as raised:
        ResultsFolder(folder.path).choices()
    return str(raised.value)


def test_a_schema_1_file_reads_as_what_it_said_and_stays_as_it_is(old):
    folder, text = old
    data = json.loads(text)["choices"][0]
    [c] = ResultsFolder(folder.path).choices()
    assert (folder.path / CHOICE_FILE).read_text() == text   # reading rewrites nothing
    assert (c.conf, c.reasons, c.decision, c.max_slowdown, c.trials_recorded) == \
        (ES, tuple(data["reasons"]), data["decision"], 0.02, 6)
    # the winner's and the default's figures, where they live now
    assert [s.conf for s in c.settings] == [ES, ""]
    assert (c.winner.peak_reserved_bytes, c.winner.memory, c.winner.memory_measure) == \
        (10 * GiB, 10 * GiB, MemoryMeasure.RESERVED)
    assert (c.default.state, c.default.peak_reserved_bytes, c.default.throughput.median) == \
        (SettingState.FITS, 15 * GiB, data["baseline_throughput_median"])
    cmp = c.winner.vs_default
    assert (cmp.ratio, cmp.p_value, [cmp.ci_low, cmp.ci_high], cmp.pairs, cmp.p_slower) == \
        (data["throughput_ratio"], data["throughput_p_value"], data["throughput_ratio_ci"], 3, None)
    # and back: schema 1's keys as the file had them (`repeats` it kept for the two together)
    assert {k: v for k, v in json.loads(json.dumps(schema1(c))).items() if k != "repeats"} == \
        {k: v for k, v in data.items() if k != "repeats"}


def test_report_decides_again_from_a_schema_1_folder_and_writes_the_current_schema(old):
    folder, text = old
    before = ResultsFolder(folder.path).choices()
    analyze(folder)
    after = ResultsFolder(folder.path).choices()
    assert json.loads((folder.path / CHOICE_FILE).read_text())["schema"] == CHOICE_SCHEMA == 2
    assert [(c.conf, c.reasons) for c in before] == [(c.conf, c.reasons) for c in after]
    assert schema1_text(after) == text


def test_damage_in_a_schema_1_key_is_one_line_naming_it(old):
    folder, text = old
    where = f"{folder.path / CHOICE_FILE}: field 'choices[0]."
    assert _damaged(folder, text, "peak_reserved_bytes", "a") == \
        f"{where}peak_reserved_bytes': expected an integer, got 'a'"
    assert _damaged(folder, text, "baseline_state", "lost").startswith(f"{where}baseline_state': expected one of")
    assert _damaged(folder, text, "throughput_ratio_ci", [1.0]).startswith(f"{where}throughput_ratio_ci")
    assert _damaged(folder, text, "reasons", "x").startswith(f"{where}reasons': expected a list")
    # a key schema 2 derives is checked as schema 1 checked it, though it is then dropped
    assert _damaged(folder, text, "repeats", -3) == f"{where}repeats': expected a count from 0 to 9.0072e+15, got -3"
    assert _damaged(folder, text, "fits", "yes") == f"{where}fits': expected true or false, got 'yes'"


def test_a_schema_1_file_from_before_the_data_and_the_parameters_reads(old):
    folder, text = old
    data = json.loads(text)
    for c in data["choices"]:
        for key in ("decision_data", "reasons_data", "precision_data", "max_slowdown", "tie", "baseline_state"):
            del c[key]
    (folder.path / CHOICE_FILE).write_text(json.dumps(data))
    [c] = ResultsFolder(folder.path).choices()
    assert c.conf == ES and c.reasons and c.decision_data is None and c.max_slowdown is None
    assert [s.conf for s in c.settings] == [ES] and c.winner.vs_default.tolerance is None


@pytest.mark.parametrize("version", [99, 0, "1", None, True, 1.5])
def test_a_version_this_alloctune_does_not_know_is_one_line(tmp_path, old, version):
    folder, text = old
    data = json.loads(text)
    data["schema"] = version
    (folder.path / CHOICE_FILE).write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=rf"choice.json: choice schema version {version!r}; this alloctune reads "
                                           rf"1 to {CHOICE_SCHEMA}$".replace("(", r"\(")):
        ResultsFolder(folder.path).choices()
