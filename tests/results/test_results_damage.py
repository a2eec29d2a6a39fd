"""Damaged results files: report, export and compare answer in one line naming the file and the field."""
from __future__ import annotations

import json

import pytest
from folders import choice, make_folder, repeats

from alloctune.cli.main import main
from alloctune.decide.choice import choose
from alloctune.decide.summary import summarize_settings
from alloctune.report.analysis import choice_record
from alloctune.results.folder import ResultsFolder


def finished(path):
    return make_folder(path, repeats("") + repeats("expandable_segments:True", reserved=10.0),
                       [choice("expandable_segments:True")])


def damage(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them


SWEEP_DAMAGE = [
    (lambda d: d.update(repeats="3"), "repeats"),
    (lambda d: d.update(max_slowdown=float("nan")), "max_slowdown"),
    (lambda d: d.update(budget_bytes=1e400), "budget_bytes"),
    (lambda d: d.update(grid="default"), "grid"),
    (lambda d: d["skipped"].append({"conf": 1, "reason": "x"}), "skipped[0].conf"),
    (lambda d: d.pop("workload_hash"), "workload_hash"),
    (lambda d: d.update(trace={"path": "trace.xz", "paths": [0, 1]}), "trace"),
]
CHOICE_DAMAGE = [
    (lambda d: d["choices"][0].update(conf=5), "choices[0].conf"),
    (lambda d: d["choices"][0].update(reasons="one"), "choices[0].reasons"),
    (lambda d: d["choices"][0].update(reasons_data=[{"figures": {}}]), "choices[0].reasons_data[0].code"),
    (lambda d: d["choices"][0].update(budget_bytes=float("inf")), "choices[0].budget_bytes"),
    (lambda d: d["choices"][0].pop("env_id"), "choices[0].env_id"),
    (lambda d: d.update(choices={}), "choices"),
]


def one_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("change, field", SWEEP_DAMAGE)
def test_damaged_sweep_json(tmp_path, capsys, change, field):
    folder = finished(tmp_path / "w-1")
    damage(folder.path / "sweep.json", change)
    for argv in (["export", str(folder.path)], ["report", str(folder.path)],
                 ["compare", str(folder.path), str(finished(tmp_path / "w-2").path), "-o", str(tmp_path)]):
        err = one_error(capsys, argv)
        assert "sweep.json" in err and f"field {field!r}" in err


@pytest.mark.parametrize("change, field", CHOICE_DAMAGE)
def test_damaged_choice_json(tmp_path, capsys, change, field):
    folder = finished(tmp_path / "w-1")
    damage(folder.path / "choice.json", change)
    for argv in (["export", str(folder.path)],
                 ["compare", str(folder.path), str(finished(tmp_path / "w-2").path), "-o", str(tmp_path)]):
        err = one_error(capsys, argv)
        assert "choice.json" in err and f"field {field!r}" in err


def test_invalid_utf8_and_deep_nesting_are_one_line(tmp_path, capsys):
    folder = finished(tmp_path / "w-1")
    path = folder.path / "choice.json"
    path.write_bytes(path.read_bytes().replace(b'"w"', b'"\xff\xfe"'))
    assert "choice.json: not UTF-8" in one_error(capsys, ["export", str(folder.path)])
    path.write_text('{"schema": 1, "choices": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "choice.json: not valid JSON" in one_error(capsys, ["export", str(folder.path)])
    sweep = folder.path / "sweep.json"
    data = json.loads(sweep.read_text())
    nested: object = 1
    for _ in range(200):
        nested = [nested]
    data["workload"]["params"] = nested  # valid JSON, deeper than any results file nests
    sweep.write_text(json.dumps(data))
    assert "nested more than" in one_error(capsys, ["report", str(folder.path)])


def test_the_choice_record_says_what_decided_apart_from_its_caveats(tmp_path):
    """compare shows the deciding reason from its own field; select's prose order is nobody else's business."""
    from folders import trial

    records = [trial("", reserved=15.0, tput=None, backend="sim"),
               trial("expandable_segments:True", reserved=10.0, tput=None, backend="sim")]
    [decided] = choose(summarize_settings(records))
    record = choice_record(decided)
    assert record.reasons[0].startswith("replayed from a recorded allocation trace:")
    assert record.decision == record.reasons[1]
    folder = ResultsFolder(tmp_path)
    folder.path.mkdir(exist_ok=True)
    folder.write_choice([record])
    assert folder.choices() == [record]  # written and read back through the same typed record
