"""Why a sweep skipped a setting, as sweep.json keeps it: a settings rule's own text, or the rounds' decision as a
code and its figures, said in words only where it is shown (report/words.skipped_words); a sweep.json from before
the data, which kept that decision as a sentence, still reads and shows it."""
from __future__ import annotations

import json

from folders import make_folder, repeats

from alloctune.decide.reasons import Code, Reason
from alloctune.decide.quoted import Unmeasured
from alloctune.decide.summary import MemoryMeasure
from alloctune.api.compare import compare_folders
from alloctune.report.words import sentence, skipped_words
from alloctune.results.folder import ResultsFolder, Skipped
from alloctune.results.names import SWEEP_FILE
from alloctune.api.analyze import analyze
from alloctune.units import GiB

ES, MS, RP = "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"
ENV = "torch-2.11.0"
LOSES = Reason(Code.LOSES_ON_MEMORY, Unmeasured(MemoryMeasure.RESERVED, 18 * GiB, ES, 10 * GiB, 0.01, True))
OLD = "predicted to need more memory than an older sweep's winner"   # a sentence as sweep.json kept it before


def folder(tmp_path, name: str) -> ResultsFolder:
    made = make_folder(tmp_path / name, repeats("") + repeats(ES, reserved=10.0),
                       skipped=[(MS, "invalid for this torch", ENV)])
    info = made.info()
    info.grid += [MS, RP]
    info.skipped.append(Skipped(RP, env_id=ENV, why=LOSES.record()))
    made.write_info(info)
    return made


def test_sweep_json_keeps_the_decision_as_data_and_the_words_are_made_when_shown(tmp_path):
    made = folder(tmp_path, "w")
    [entry] = [s for s in json.loads((made.path / SWEEP_FILE).read_text())["skipped"] if s["conf"] == RP]
    assert entry["reason"] == "" and entry["why"]["code"] == Code.LOSES_ON_MEMORY.value
    assert entry["why"]["figures"]["peak_bytes"] == 18 * GiB
    read = made.info().skipped_as(RP, ENV)
    assert Reason.from_record(read.why) == LOSES and skipped_words(read) == sentence(LOSES)
    assert skipped_words(made.info().skipped_as(MS, ENV)) == "invalid for this torch"   # a rule's own text
    analyze(made)
    summary = (made.path / "summary.md").read_text()
    assert sentence(LOSES) in summary and "invalid for this torch" in summary


def test_an_older_sweep_json_with_the_sentence_still_reads_and_shows_it(tmp_path):
    older = folder(tmp_path, "old")
    data = json.loads((older.path / SWEEP_FILE).read_text())
    for entry in data["skipped"]:
        entry.pop("why")
        entry["reason"] = entry["reason"] or OLD
    (older.path / SWEEP_FILE).write_text(json.dumps(data))
    read = older.info().skipped_as(RP, ENV)
    assert read.why is None and skipped_words(read) == OLD
    analyze(older)
    assert OLD in (older.path / "summary.md").read_text()
    # compare shows why a side has no trials of a setting, from either kind of entry
    rows = {row.conf: row for row in compare_folders([folder(tmp_path, "new"), older]).rows}
    assert rows[RP].missing == [f"skipped: {sentence(LOSES)}", f"skipped: {OLD}"]
