"""Writing a decided folder (report/analysis.py): choice.json's record of a choice, every reason as a
sentence and as data, and the schema story: a choice.json from before the data still reads."""
from __future__ import annotations

import json

import pytest
from folders import make_folder, repeats, trial

from alloctune.decide.choice import choose
from alloctune.decide.reasons import Code, Reason
from alloctune.decide.summary import summarize_settings
from alloctune.report.analysis import choice_record
from alloctune.report.words import sentence
from alloctune.results.choices import ChoiceRecord, ReasonRecord
from alloctune.results.figures import MemoryMeasure, SettingState
from alloctune.results.folder import ResultsFolder
from alloctune.results.names import CHOICE_FILE
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.api.analyze import analyze
from alloctune.units import GiB

ES, MS = "expandable_segments:True", "max_split_size_mb:128"
ASYNC = "backend:cudaMallocAsync"


def device(conf, reserved, used, tputs=(100.0, 101.0, 99.0)):
    return [TrialRecord("w", "h1", conf, i, "torch-2.11.0", "cuda", TrialState.OK,
                        Measurement(int(reserved * GiB), 8 * GiB, device_peak_used_bytes=int(used * GiB),
                                    throughput=t, unit="tokens"), env={"torch": "2.11.0+cu130"})
            for i, t in enumerate(tputs)]


def record_of(records, max_slowdown=0.02) -> ChoiceRecord:
    [choice] = choose(summarize_settings(records, max_slowdown))
    return choice_record(choice)


def test_the_record_of_a_measured_winner():
    r = record_of(repeats("") + repeats(ES, reserved=10.5, tputs=(100.0, 101.5, 98.5))
                  + repeats(MS, reserved=20.0, tputs=(120, 121, 119)))
    assert (r.conf, r.label, r.is_default, r.simulated, r.fits) == (ES, ES, False, False, True)
    assert r.torch_version == "2.11.0+cu130" and r.verdict == "no significant difference"
    # every setting of the group once, ranked; the winner and the default looked up among them
    assert [s.conf for s in r.settings] == [ES, "", MS] and r.winner is r.settings[0] and r.default is r.settings[1]
    assert (r.winner.peak_reserved_bytes, r.default.peak_reserved_bytes) == (int(10.5 * GiB), int(15 * GiB))
    cmp = r.winner.vs_default
    assert r.throughput_ratio == cmp.ratio == pytest.approx(1.0, abs=0.01) and cmp.pairs == 3
    assert r.winner.repeats == 3 and r.default.vs_default is None and r.settings[2].vs_default.ratio > 1.1
    assert cmp.ci_low < cmp.ratio < cmp.ci_high
    assert 0 < r.detectable_slowdown < 0.05
    assert [u.conf for u in r.runners_up] == ["", MS]
    # each sentence beside the reason it says
    assert r.decision == r.reasons[0] and r.decision_data == r.reasons_data[0]
    assert [d.code for d in r.reasons_data] == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME]
    assert [u.why_data.code for u in r.runners_up] == [Code.COSTS_MORE, Code.MORE_MEMORY]
    json.dumps(r.to_json(), allow_nan=False)


def test_the_record_of_other_outcomes():
    kept = record_of(repeats("") + repeats(ES, reserved=14.95))
    assert kept.is_default and kept.conf == "" and kept.throughput_ratio == 1.0 and kept.winner is kept.default
    assert kept.decision_data.code == Code.KEEP_DEFAULT
    none = record_of([trial("", state=TrialState.OOM, budget=GiB), trial(ES, state=TrialState.OOM, budget=GiB)])
    assert (none.fits, none.conf, none.label, none.verdict) == (False, None, "nothing fits", "nothing fits")
    assert none.decision_data.code == Code.NOTHING_FITS and none.budget_bytes == GiB and none.winner is None
    assert [(s.state, s.failed_repeats, s.repeats) for s in none.settings] == [(SettingState.OOM, 1, 1)] * 2
    sim = record_of([trial("", tput=None, backend="sim"), trial(ES, reserved=10.0, tput=None, backend="sim")])
    assert sim.simulated and sim.verdict == "not measured" and sim.throughput_ratio is None
    assert [d.code for d in sim.reasons_data][:2] == [Code.SIMULATED, Code.SAVES_MEMORY]
    assert sim.decision_data == sim.reasons_data[1] and sim.precision == "" and sim.precision_data is None
    across = record_of(device("", 40.0, 41.0) + device(ES, 32.68, 33.5) + device(ASYNC, 32.59, 33.4))
    assert across.winner.memory_measure is MemoryMeasure.DEVICE and across.winner.memory == int(33.5 * GiB)
    assert across.winner.peak_reserved_bytes == int(32.68 * GiB) and across.default.memory == int(41 * GiB)
    lenient = record_of(repeats("") + repeats(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5)), max_slowdown=0.15)
    assert lenient.verdict == "slower" and lenient.max_slowdown == 0.15
    assert lenient.reasons_data[1].code == Code.THROUGHPUT_DIFFERS


def test_analyze_writes_every_reason_in_words_and_as_data(tmp_path):
    """What choice.json holds as data says, read back through the typed reader, exactly its sentences."""
    records = (repeats("") + repeats(ES, reserved=8.0, tputs=(80.0, 80.5, 79.5)) + repeats(MS, reserved=14.95))
    folder = make_folder(tmp_path / "w", records)
    analyze(folder)
    [r] = folder.choices()
    assert r.is_default and [d.code for d in r.reasons_data] == [Code.KEEP_DEFAULT, Code.REFUSED_LOWER]
    refusals = {u.conf: Reason.from_record(u.why_data) for u in r.runners_up}
    reasons = [Reason.from_record(d, "choice.json") for d in r.reasons_data]
    assert [sentence(x, refusals) for x in reasons] == list(r.reasons)
    assert [sentence(refusals[u.conf]) for u in r.runners_up] == [u.why for u in r.runners_up]
    assert sentence(Reason.from_record(r.precision_data)) == r.precision and r.precision
    summary = (folder.path / "summary.md").read_text()
    assert all(f"- {text}" in summary for text in r.reasons) and f"Precision: {r.precision}." in summary


def test_a_choice_json_from_before_reasons_were_data_still_reads(tmp_path):
    """The data fields are optional: a file without them reads, with the sentences alone."""
    folder = make_folder(tmp_path / "w", repeats("") + repeats(ES, reserved=10.0))
    analyze(folder)
    path = folder.path / CHOICE_FILE
    data = json.loads(path.read_text())
    for c in data["choices"]:
        for key in ("decision_data", "reasons_data", "precision_data"):
            del c[key]
        for u in c["runners_up"]:
            del u["why_data"]
    path.write_text(json.dumps(data))
    [old] = ResultsFolder(folder.path).choices()
    assert old.decision and old.reasons and old.runners_up[0].why
    assert (old.decision_data, old.reasons_data, old.precision_data, old.runners_up[0].why_data) == (None, (), None,
                                                                                                     None)


def test_a_reason_with_an_unknown_code_or_damaged_figures_is_one_error():
    from alloctune.errors import ResultsError

    with pytest.raises(ResultsError, match="where: field 'code': expected a reason code, got 'better'"):
        Reason.from_record(ReasonRecord("better"), "where")
    with pytest.raises(ResultsError, match=r"where.figures: field 'peak_bytes': expected an integer"):
        Reason.from_record(ReasonRecord("more_memory", {"measure": "peak reserved", "peak_bytes": "x",
                                                        "default_bytes": 1}), "where")
