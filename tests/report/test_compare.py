"""compare: real results folders covering every mark, the best setting per environment, and the outputs."""
import pytest
from folders import choice, make_folder, repeats, trial
from rich.console import Console

from alloctune.cli.main import main
from alloctune.errors import AlloctuneError, OptionError, ResultsError
from alloctune.decide.regression import Mark, Why
from alloctune.api.compare import compare, compare_folders
from alloctune.report.compare_output import cell_lines, plot_comparison, print_comparison, write_compare_md
from alloctune.results.folder import find_results
from alloctune.results.records import TrialState
from alloctune.units import GiB

OLD, NEW = dict(env_id="torch-2.10.0", torch="2.10.0+cu128"), dict(env_id="torch-2.11.0", torch="2.11.0+cu130")
SAME_TPUT = (100.0, 101.0, 99.0)
# conf: (records in A, records in B, expected mark of B against A)
CASES = {
    "": (repeats("", **OLD), repeats("", tputs=(100.5, 99.0, 100.0), **NEW), Mark.SAME),
    "expandable_segments:True": (repeats("expandable_segments:True", reserved=11.0, **OLD),
                                 repeats("expandable_segments:True", reserved=13.2, **NEW), Mark.REGRESSION),
    "roundup_power2_divisions:4": (repeats("roundup_power2_divisions:4", **OLD),
                                   repeats("roundup_power2_divisions:4", reserved=12.0, **NEW), Mark.IMPROVEMENT),
    "max_split_size_mb:256": (repeats("max_split_size_mb:256", **OLD),
                              repeats("max_split_size_mb:256", tputs=(80.0, 81.0, 79.0), **NEW), Mark.REGRESSION),
    "max_split_size_mb:512": (repeats("max_split_size_mb:512", **OLD),
                              repeats("max_split_size_mb:512", tputs=(120.0, 121.0, 119.0), **NEW),
                              Mark.IMPROVEMENT),
    # 3% slower, clearly beyond noise but within the 5% factor
    "max_split_size_mb:1024": (repeats("max_split_size_mb:1024", tputs=(100.0, 100.2, 99.8), **OLD),
                               repeats("max_split_size_mb:1024", tputs=(97.0, 97.2, 96.8), **NEW),
                               Mark.WITHIN_FACTOR),
    # memory +4% is within the factor; throughput noise only
    "max_split_size_mb:2048": (repeats("max_split_size_mb:2048", reserved=15.0, **OLD),
                               repeats("max_split_size_mb:2048", reserved=15.6, tputs=(104.0, 96.0, 101.0), **NEW),
                               Mark.SAME),
    "max_split_size_mb:128": (repeats("max_split_size_mb:128", **OLD),
                              [trial("max_split_size_mb:128", i, state=TrialState.OOM, **NEW) for i in range(3)],
                              Mark.NEW_FAILURE),
    "max_split_size_mb:64": ([trial("max_split_size_mb:64", 0, state=TrialState.CRASHED, **OLD)]
                             + repeats("max_split_size_mb:64", **OLD)[1:],
                             repeats("max_split_size_mb:64", **NEW), Mark.FIXED_FAILURE),
    "max_split_size_mb:32": ([trial("max_split_size_mb:32", state=TrialState.OOM, **OLD)],
                             [trial("max_split_size_mb:32", state=TrialState.TIMEOUT, **NEW)], Mark.BOTH_FAIL),
    "large_segment_size_mb:40": ([], repeats("large_segment_size_mb:40", **NEW), Mark.INCOMPARABLE),
    "backend:cudaMallocAsync": (repeats("backend:cudaMallocAsync", **OLD), [], Mark.INCOMPARABLE),
    "expandable_segments:False": (repeats("expandable_segments:False", **OLD),
                                  repeats("expandable_segments:False", budget=24 * GiB, **NEW), Mark.INCOMPARABLE),
}
SKIP_REASON = "large_segment_size_mb needs torch >= 2.11 (torch 2.10 does not know it)"


@pytest.fixture
def folders(tmp_path):
    a = make_folder(tmp_path / "a", [r for old, _, _ in CASES.values() for r in old],
                    [choice("roundup_power2_divisions:4", **OLD)],
                    skipped=[("large_segment_size_mb:40", SKIP_REASON, "torch-2.10.0")])
    b = make_folder(tmp_path / "b", [r for _, new, _ in CASES.values() for r in new],
                    [choice("expandable_segments:True", **NEW)])
    return a, b


def by_conf(comparison):
    return {row.conf: row for row in comparison.rows}


def test_every_mark(folders):
    comparison = compare_folders(list(folders))
    assert [c.label for c in comparison.columns] == ["torch-2.10.0", "torch-2.11.0"]
    rows = by_conf(comparison)
    assert set(rows) == set(CASES)
    for conf, (_, _, mark) in CASES.items():
        assert rows[conf].deltas[0].mark is Mark.BASELINE
        assert rows[conf].deltas[1].mark is mark, (conf, rows[conf].deltas[1])


def test_deltas_and_notes(folders):
    rows = by_conf(compare_folders(list(folders)))
    es = rows["expandable_segments:True"].deltas[1]
    assert es.reserved == pytest.approx(0.2, abs=1e-6) and es.throughput == pytest.approx(0.0)
    slow = rows["max_split_size_mb:256"].deltas[1]
    assert slow.reserved == 0 and slow.throughput == pytest.approx(-0.2) and slow.p_value < 0.05
    assert rows[""].deltas[1].p_value > 0.05
    assert rows["large_segment_size_mb:40"].notes[1] == f"skipped: {SKIP_REASON} in torch-2.10.0"
    assert rows["backend:cudaMallocAsync"].notes[1] == "not in its grid in torch-2.11.0"
    assert "budget differs" in rows["expandable_segments:False"].notes[1]
    assert rows["max_split_size_mb:128"].notes[1] == "oom in 3 of 3 trials"
    assert rows["max_split_size_mb:64"].notes[1] == "was crashed in 1 of 3 trials"
    cell = rows["expandable_segments:True"].cells[1]
    assert cell.peak_reserved_bytes == int(13.2 * GiB) and cell.reserved_ratio == pytest.approx(1.32)
    assert cell.throughput.median == 100.0 and cell.unit == "tokens"


def test_best_setting_per_environment_and_whether_it_changed(folders, tmp_path):
    comparison = compare_folders(list(folders))
    assert [c.best for c in comparison.columns] == ["roundup_power2_divisions:4", "expandable_segments:True"]
    assert comparison.best_changed(1) is True
    # a third folder: same env_id as b (so columns are named by folder), no choice yet, another workload definition
    c = make_folder(tmp_path / "c", repeats("", whash="h2", **NEW), whash="h2")
    comparison = compare_folders([*folders, c])
    assert [col.label for col in comparison.columns] == ["torch-2.10.0", "b", "c"]
    assert comparison.columns[2].best is None and "not finished" in comparison.columns[2].best_note
    assert comparison.best_changed(2) is None
    row = by_conf(comparison)[""]
    assert row.deltas[2].mark is Mark.INCOMPARABLE and "workload definition differs" in row.notes[2]


def test_two_identical_sweeps_show_no_change(tmp_path):
    folders = [make_folder(tmp_path / name, repeats("", tputs=tp) + repeats("expandable_segments:True",
                                                                            reserved=11.0, tputs=tp),
                           [choice("expandable_segments:True")])
               for name, tp in (("run1", (100.0, 101.0, 99.0)), ("run2", (99.5, 100.8, 101.2)))]
    comparison = compare_folders(folders)
    assert [c.label for c in comparison.columns] == ["run1", "run2"]   # same env_id twice: named by folder
    assert {row.deltas[1].mark for row in comparison.rows} == {Mark.SAME}
    assert comparison.best_changed(1) is False


def test_one_folder_with_two_environments_and_replays(tmp_path):
    records = (repeats("", **OLD) + repeats("", reserved=16.5, **NEW)
               + [trial("", tput=None, backend="sim", **NEW)])
    comparison = compare_folders([make_folder(tmp_path / "multi", records)])
    assert [c.label for c in comparison.columns] == ["torch-2.10.0", "torch-2.11.0", "torch-2.11.0 (sim)"]
    row = comparison.rows[0]
    assert row.deltas[1].mark is Mark.REGRESSION
    # a replay has no throughput: judged on memory alone, and says nothing about throughput
    assert row.deltas[2].mark is Mark.SAME and row.deltas[2].throughput is None


def test_too_few_repeats_cannot_show_a_throughput_change(tmp_path):
    a = make_folder(tmp_path / "a", [trial("", tput=100.0, **OLD)])
    b = make_folder(tmp_path / "b", [trial("", tput=80.0, **NEW)])
    row = compare_folders([a, b]).rows[0]
    delta = row.deltas[1]
    assert delta.mark is Mark.SAME and delta.throughput == pytest.approx(-0.2) and delta.why is Why.UNTESTED
    assert row.notes[1] == "too few repeats to test throughput"


def test_refusals(tmp_path, folders):
    with pytest.raises(ResultsError, match=r"^nothing to compare: \S+a holds 1 environment with trials; compare "
                                           r"needs at least two$"):
        compare_folders([folders[0]])
    for nothing in ([], None, 3):   # never a TypeError from deep inside, nor 'nothing to compare: hold 0 ...'
        with pytest.raises(AlloctuneError, match=r"^compare: expected results folders \(paths or ResultsFolders; "
                                                 r"the first is the baseline\), got "):
            compare(nothing)
    with pytest.raises(OptionError, match=r"^factor must be a fraction in \(0, 1\) such as 0.05, got 1.5$"):
        compare(list(folders), factor=1.5, output=None)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sweep.json").write_text('{"schema": 99}')
    with pytest.raises(ResultsError, match="schema version 99"):
        compare_folders([folders[0], *find_results(broken)])


def test_factor_changes_the_marks(folders):
    rows = by_conf(compare_folders(list(folders), factor=0.25))
    assert rows["expandable_segments:True"].deltas[1].mark is Mark.SAME       # +20% < 25%
    assert rows["max_split_size_mb:256"].deltas[1].mark is Mark.WITHIN_FACTOR  # -20% significant, < 25%


def test_outputs(folders, tmp_path):
    comparison = compare_folders(list(folders))
    console = Console(record=True, width=250)
    print_comparison(comparison, console)
    text = console.export_text()
    for word in ("regression", "improvement", "new failure", "fixed failure", "incomparable", "best setting",
                 "OOM (3/3)", "mem +20.0%"):
        assert word in text, word
    md = write_compare_md(comparison, tmp_path / "compare.md").read_text()
    assert SKIP_REASON in md and "changed from `roundup_power2_divisions:4`" in md
    assert "- − regression (more memory, or less throughput, beyond the factor): 2" in md
    assert "- ✗ new failure (fits in the baseline, not here): 1" in md
    assert "- ? incomparable (a side missing, or another workload or budget): 3" in md
    png = plot_comparison(comparison, tmp_path / "compare.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli(folders, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", str(folders[0].path), str(folders[1].path), "--factor", "0.05", "-o", str(out)]) == 0
    assert "regression" in capsys.readouterr().out
    assert (out / "compare.md").exists() and (out / "compare.png").exists()
    # the parent of both folders is read as both, in name order
    assert main(["compare", str(tmp_path), "-o", str(out)]) == 0
    assert main(["compare", str(folders[0].path), "--factor", "5"]) == 2   # an argument mistake: one line
    assert "--factor" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert "no results folder" in capsys.readouterr().err
    # -o naming a file: one line that says -o takes a folder, before any work, and the file stays as it was
    (tmp_path / "notes.md").write_text("mine")
    assert main(["compare", str(folders[0].path), str(folders[1].path), "-o", str(tmp_path / "notes.md")]) == 2
    err = capsys.readouterr().err   # one line; a long path is shown shortened in its middle
    assert err.startswith("alloctune: error: --output: '") and err.count("\n") == 1
    assert err.endswith("notes.md' is a file; give a folder for compare.md and compare.png\n")
    assert (tmp_path / "notes.md").read_text() == "mine"


def test_a_mark_judges_and_does_not_point(folders):
    """A throughput rise and a memory drop are both improvements and show one symbol; a memory rise and a
    throughput drop both regressions: no mark is an arrow that says 'down' of a throughput that rose."""
    from alloctune.report.compare_output import MEANING, STYLE

    rows = by_conf(compare_folders(list(folders)))
    faster, leaner = cell_lines(rows["max_split_size_mb:512"], 1), cell_lines(rows["roundup_power2_divisions:4"], 1)
    fatter, slower = cell_lines(rows["expandable_segments:True"], 1), cell_lines(rows["max_split_size_mb:256"], 1)
    assert "tput +20.0%" in faster[-2] and "mem -20.0%" in leaner[-2]
    assert faster[-1] == leaner[-1] == "+ improvement"
    assert "mem +20.0%" in fatter[-2] and "tput -20.0%" in slower[-2]
    assert fatter[-1] == slower[-1] == "− regression"
    assert not {glyph for _, glyph in STYLE.values()} & set("▲▼↑↓")
    assert set(MEANING) == set(Mark) - {Mark.BASELINE}


def method(records, source, unit="steps"):
    """The records with their throughput measured by `source`, in `unit`."""
    from dataclasses import replace

    from alloctune.results.records import ThroughputSource

    return [replace(r, measurement=replace(r.measurement, throughput_source=ThroughputSource(source), unit=unit))
            for r in records]


@pytest.mark.parametrize("theirs, unit", [("wall_time", "steps"), ("step_marks", "samples")])
def test_throughput_measured_differently_is_not_compared(tmp_path, theirs, unit):
    """Same workload, torch and GPU: a whole-run figure against a steady-state one (or another unit) is no
    '+250% improvement'. Memory still compares: a memory regression keeps its mark."""
    a = make_folder(tmp_path / "a", method(repeats("", **OLD) + repeats("max_split_size_mb:128", **OLD),
                                           "step_marks"))
    b = make_folder(tmp_path / "b", method(repeats("", tputs=(350.0, 351.0, 349.0), **NEW)
                                           + repeats("max_split_size_mb:128", reserved=18.0, **NEW), theirs, unit))
    rows = by_conf(compare_folders([a, b]))
    for conf, mark in (("", Mark.SAME), ("max_split_size_mb:128", Mark.REGRESSION)):
        delta = rows[conf].deltas[1]
        assert (delta.mark, delta.why, delta.throughput, delta.p_value) == (mark, Why.METHOD_DIFFERS, None, None)
    note = rows[""].notes[1]
    assert note.startswith("throughput measured differently, not compared: ")
    assert cell_lines(rows[""], 1)[-2:] == ["= no significant change, on memory alone", note]
    assert "torch-2.10.0: alloctune.step() marks in the program" in note and "in steps/s" in note
    assert f"in {unit}/s" in note and ("whole run's wall time" in note) == (theirs == "wall_time")
    # measured alike, the same figures are a throughput improvement
    same = make_folder(tmp_path / "c", method(repeats("", tputs=(350.0, 351.0, 349.0), **NEW), "step_marks"))
    delta = compare_folders([a, same]).rows[0].deltas[1]
    assert delta.mark is Mark.IMPROVEMENT and delta.why is None and delta.throughput == pytest.approx(2.5, abs=0.01)


def _replayed(records, trace_torch="2.11.0+cu130", simulated_as="2.11.0+cu130"):
    """`records` as a sim sweep run by another interpreter keeps them: no throughput, its env_id that interpreter's,
    the torch whose allocator it followed and the trace's in its env."""
    from dataclasses import replace

    return [replace(r, env_id="sim:torch-2.13.0+cpu", backend="sim",
                    measurement=replace(r.measurement, throughput=None, unit=None),
                    env=dict(r.env, simulated_as=simulated_as, trace_torch=trace_torch)) for r in records]


def test_a_mark_without_throughput_on_both_sides_says_memory_alone_everywhere(tmp_path, capsys):
    """Measured against a replay of its own trace: a replay has no throughput, so its marks rest on memory alone, and
    the cells, the legend (terminal and compare.md) and the plot's legend say so and say which column is which."""
    from alloctune.report.compare_output import comparison_figure, legend

    a = make_folder(tmp_path / "gpu", repeats("", **NEW) + repeats("expandable_segments:True", **NEW))
    b = make_folder(tmp_path / "sim", _replayed([trial("", **NEW), trial("expandable_segments:True", reserved=18.0,
                                                                          **NEW)]))
    comparison = compare_folders([a, b])
    rows = by_conf(comparison)
    assert [d.memory_alone for d in rows[""].deltas] == [False, True] and rows[""].deltas[1].mark is Mark.SAME
    assert cell_lines(rows[""], 1)[-1] == "= no significant change, on memory alone"
    assert cell_lines(rows["expandable_segments:True"], 1)[-1] == "− regression, on memory alone"
    lines = legend(comparison)
    assert "= no significant change (memory within the factor, throughput within noise): 0" in lines
    assert ("= no significant change, on memory alone (memory within the factor; throughput not compared: a side "
            "has none, or measured it differently): 1") in lines
    md = write_compare_md(comparison, tmp_path / "compare.md").read_text()
    assert all(f"- {line}" in md for line in lines)
    assert main(["compare", str(a.path), str(b.path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    shown = legend(comparison, every=False)   # the marks it shows: a regression and a 'same', on memory alone
    assert len(shown) == 2 and "Marks: " + " ".join(" ".join(shown).split()) in out
    assert "throughput within noise" not in out
    fig = comparison_figure(comparison)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()][:2] == [
        "torch-2.11.0\nmeasured with torch 2.11.0+cu130", "sim:torch-2.13.0+cpu\nreplayed with torch 2.11's allocator"]


def test_a_replay_column_names_the_torch_it_followed_once(tmp_path, capsys, monkeypatch):
    """A sim sweep run under torch 2.13 that followed the trace's torch 2.11: its header says 'replayed with torch
    2.11's allocator', as every command says it, and the trace's torch only where it is another."""
    monkeypatch.setenv("COLUMNS", "200")   # each header line on one line of the table
    a = make_folder(tmp_path / "gpu", repeats("", **NEW))
    same = make_folder(tmp_path / "same", _replayed([trial("", **NEW)]))
    other = make_folder(tmp_path / "other", _replayed([trial("", **NEW)], simulated_as="2.1.2+cu121"))
    for folder, trace_line in ((same, False), (other, True)):
        assert main(["compare", str(a.path), str(folder.path)]) == 0
        out = " ".join(capsys.readouterr().out.split())
        followed = "2.11" if folder is same else "2.1"
        assert out.count(f"replayed with torch {followed}'s allocator") == 1 and "simulated" not in out
        assert ("trace from torch 2.11.0+cu130" in out) is trace_line and "measured with torch 2.11.0+cu130" in out


def test_throughput_of_a_first_pass_and_of_a_steady_pass_is_not_compared(tmp_path):
    """A workload trial records no throughput source: one from before the steady pass (no `warm_throughput`) timed
    the first pass over its measured steps, a later one a second pass, some 3.5 times faster on the H200. Same
    workload, torch and GPU: not '+250% improvement', and said why; two later sweeps still compare."""
    from dataclasses import replace

    def steady(records):
        return [replace(r, measurement=replace(r.measurement, warm_throughput=r.measurement.throughput / 3.5))
                for r in records]

    old = make_folder(tmp_path / "old", repeats("", **NEW))
    new = make_folder(tmp_path / "new", steady(repeats("", tputs=(350.0, 351.0, 349.0), **NEW)))
    row = compare_folders([old, new]).rows[0]
    delta = row.deltas[1]
    assert (delta.mark, delta.why, delta.throughput, delta.memory_alone) == (Mark.SAME, Why.METHOD_DIFFERS, None,
                                                                              True)
    assert "old: its source not recorded (an older record; a workload's then timed the first pass" in row.notes[1]
    assert "new: the workload's measured steps, run a second time in the same process and timed" in row.notes[1]
    again = make_folder(tmp_path / "again", steady(repeats("", **NEW)))
    assert compare_folders([again, new]).rows[0].deltas[1].mark is Mark.IMPROVEMENT


def test_a_budget_given_as_a_fraction_is_said_so_and_judged(tmp_path):
    """Measured trials keep a --budget fraction as a fraction (their budget_bytes None): the column says it as the
    sweep was given, in bytes of the card it ran on, and it is no budget-less sweep."""
    from dataclasses import replace

    from alloctune.results.folder import ResultsFolder

    on_card = [replace(r, env=dict(r.env, gpu_memory=80 * GiB)) for r in repeats("", **NEW)]
    whole = make_folder(tmp_path / "whole", on_card)
    half = make_folder(tmp_path / "half", on_card)
    ResultsFolder(half.path).write_info(replace(half.info(), budget_fraction=0.5))
    comparison = compare_folders([whole, half])
    assert [c.budget for c in comparison.columns] == ["none", "0.5 of the device (40.00 GiB)"]
    row = comparison.rows[0]
    assert row.deltas[1].mark is Mark.INCOMPARABLE
    assert row.notes[1].startswith("budget differs (none vs 0.5 of the device (40.00 GiB))")


def test_a_trial_the_sweep_leaves_out_of_its_figures_is_left_out_of_the_comparison(tmp_path):
    """A command's recording trial (`extra`: the whole run recorded, its throughput a recorded run's) stands beside
    the planned repeats and no figure of the sweep counts it; compare counts the same trials as the sweep's report,
    so the same folder's median says the same in both."""
    from dataclasses import replace

    recorded = replace(trial("", tput=50.0), recording=True, extra=True)
    a = make_folder(tmp_path / "a", [recorded] + repeats("", tputs=(100.0, 102.0)))
    b = make_folder(tmp_path / "b", repeats("", tputs=(100.0, 102.0)))
    [row] = compare_folders([a, b]).rows
    assert [(c.trials, c.samples) for c in row.cells] == [(2, (100.0, 102.0)), (2, (100.0, 102.0))]
    assert row.deltas[1].throughput == 0.0
