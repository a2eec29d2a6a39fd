"""The width rule's pieces (report/layout.py, report/tables.py): prose broken between words only, a number kept with
its unit; commands broken between shell words that a shell reads back whole; the width from COLUMNS, else 80 when
not a terminal; settings numbered when a table cannot hold them; a title wider than its table put above it; and a
simulated sweep's table without the columns it has nothing to say in. The commands' own output is in
tests/cli/test_width.py."""
from __future__ import annotations

import io
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from clirun import in_process
from rich.console import Console

from alloctune.report.layout import NOT_A_TERMINAL, command, output_width, wrap
from alloctune.report.tables import figures_table, fold, markdown_table, natural_width, print_table, whole_settings

ROOT = Path(__file__).resolve().parents[2]
HPSEARCH = ROOT / "workloads" / "hpsearch.yaml"
LONGEST = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"


def test_wrap_breaks_between_words_and_keeps_a_number_with_its_unit():
    text = "peak reserved 26.87 GiB against the default's 37.60 GiB and 238,631 tokens/s"
    for width in range(20, 60):
        lines = wrap(text, width, "  ", "    ")
        assert " ".join(" ".join(lines).split()) == text
        assert all(len(line) <= width for line in lines)
        assert not any(line.endswith(("26.87", "37.60", "238,631")) for line in lines)
    assert wrap(f"see {LONGEST} here", 20) == ["see", LONGEST, "here"]   # too long for a line: whole, alone


def test_a_command_breaks_between_shell_words_and_reads_back_whole():
    words = ["alloctune", "export", "/a/very/long/path/to/a/results/folder/transformer-varlen-h200-20261201",
             "--format", "env", "-o", "alloc.env"]
    assert command("Next:", words, 200) == ["Next: " + shlex.join(words)]
    lines = command("Next:", words, 60)
    assert lines[0] == "Next:" and all(line.endswith(" \\") for line in lines[1:-1])
    assert "--format env" in " ".join(lines)   # an option stays with its value
    assert shlex.split(" ".join(line.removesuffix("\\") for line in lines[1:])) == words
    quoted = command("Run:", ["alloctune", "sweep", "--", "python", "train.py", "--name", "two words"], 30)
    assert shlex.split(" ".join(line.removesuffix("\\") for line in quoted[1:]))[-1] == "two words"


def test_the_width_comes_from_columns_else_80_when_not_a_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "123")
    assert output_width(io.StringIO()) == 123
    monkeypatch.delenv("COLUMNS")
    assert output_width(io.StringIO()) == NOT_A_TERMINAL == 80
    with open(os.devnull, "w") as devnull:
        assert output_width(devnull) == 80


def table_of(labels):
    return figures_table(["setting", "peak\nres."], [[label, "26.87"] for label in labels], title="t",
                         setting=0)


def test_settings_too_long_for_the_table_are_folded_between_their_keys():
    keys = f"expandable_segments:True,{LONGEST}"
    settings = ["default", keys]
    table, below = whole_settings(table_of, settings, 100)
    assert below == [] and list(table.columns[0].cells) == settings
    narrow = natural_width(table_of(["default", fold(keys, 1)]))   # each key on its own line, its list whole
    table, below = whole_settings(table_of, settings, narrow)   # the long one folded: 'default' stays as it is
    cells = list(table.columns[0].cells)
    assert below == [] and cells[0] == "default" and cells[1] == f"expandable_segments:True,\n{LONGEST}"
    assert natural_width(table) <= narrow
    table, below = whole_settings(table_of, settings, narrow - 1)   # no fold fits: the long one is numbered
    assert below == [f"  (1) {keys}"] and list(table.columns[0].cells) == ["default", "(1)"]


def test_a_setting_is_numbered_only_where_no_fold_fits():
    settings = ["default", "expandable_segments:True", LONGEST, "max_split_size_mb:128",
                "expandable_segments:True,max_split_size_mb:512,garbage_collection_threshold:0.8"]
    narrowest = [fold(s, 1) for s in settings]   # every piece on its own line
    for width in range(10, 120):
        table, below = whole_settings(table_of, settings, width)
        numbered = [line.split(") ", 1)[1] for line in below]
        assert set(numbered) <= set(settings), width
        for setting, cell in zip(settings, table.columns[0].cells):   # each one whole: in the table, or below
            assert setting in numbered or cell.replace("\n", "") == setting, (width, cell)
        if numbered:   # only where even the narrowest fold does not fit
            assert natural_width(table_of(narrowest)) > width, width
        assert all(len(n) >= len(i) for n in numbered for i in settings if i not in numbered), width


def test_diagnose_numbers_its_replayed_settings_by_the_same_rule():
    """diagnose's plain-text table of replayed settings (report/diagnosis.py) names a setting whole where it fits
    beside the figures, and numbers only the longest, as every table does."""
    import alloctune
    from alloctune.report.diagnosis import diagnosis_lines

    d = alloctune.diagnose(ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle", jobs=1)
    for width, numbered in ((100, []), (70, [LONGEST])):
        lines = diagnosis_lines(d, width)
        start = next(i for i, line in enumerate(lines) if line.startswith("  setting "))
        table = lines[start:lines.index("", start)]
        assert [line.split(") ", 1)[1] for line in table if re.fullmatch(r"  \(\d+\) \S+", line)] == numbered
        assert any(line.startswith("  default (recorded) ") for line in table), width
        assert all(len(line) <= width for line in table if not re.fullmatch(r"  \(\d+\) \S+", line)), width


@pytest.mark.parametrize("command", ["report", "replay"])
def test_no_figure_is_cut_at_any_width_and_names_stand_inline_where_they_fit(tmp_path, command):
    """From 20 to 200 columns: every figure and every setting whole on a line of the output; the table wider than
    the console rather than a figure cut; at 200 columns no setting numbered."""
    folder = ROOT / "results" / "transformer-varlen-h200-20261129-234646"
    args = (["report", shutil.copytree(folder, tmp_path / "f")] if command == "report"
            else ["replay", ROOT / "workloads" / "traces" / "transformer-varlen-h200.xz", "--conf",
                  "expandable_segments:True", "--conf", "max_split_size_mb:128"])
    outputs = {width: in_process(*args, env={"COLUMNS": str(width)}) for width in range(20, 201, 9)}
    wide = outputs[200].stdout
    assert "(1)" not in wide
    figures = sorted({w for line in wide.splitlines()   # a setting's "[256:1,512:2,..." holds no figure
                       for w in re.findall(r"(?<![:\d])(?:\d[\d,]*\.\d+(?: GiB)?|\d{1,3}(?:,\d{3})+)", line)})
    settings = [s for s in ("default", "expandable_segments:True", "max_split_size_mb:128") if s in wide]
    assert len(figures) > 5 and len(settings) >= 2
    for width, run in outputs.items():
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        for word in figures + settings:
            assert any(word in line for line in lines), (width, word)
        assert "…" not in run.stdout, width


def test_a_title_wider_than_its_table_is_printed_above_it():
    console = Console(record=True, width=80)
    table = figures_table(["#", "peak"], [["1", "26.87"]], title="a title far wider than the little table it names",
                          setting=None)
    print_table(console, table)
    lines = console.export_text().splitlines()
    assert lines[0] == "a title far wider than the little table it names"


@pytest.mark.slow
def test_a_simulated_sweep_has_no_empty_throughput_columns(tmp_path):
    proc = in_process("sweep", HPSEARCH, "--preset", "h200", "--conf", "expandable_segments:True", "--conf", LONGEST,
                      "--results", tmp_path, env={"COLUMNS": "100", "CUDA_VISIBLE_DEVICES": ""})   # no-GPU fallback
    assert proc.returncode == 0, proc.stderr
    tables = proc.stdout.split("Results:")[0]
    assert "/s" not in tables and "tokens" not in tables
    assert "vs" not in tables.split()   # no throughput, so no comparison column


def test_markdown_table_escapes_pipes():
    text = markdown_table(("a", "b"), [("x|y", "z\nw")])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x\\|y | z w |"]
