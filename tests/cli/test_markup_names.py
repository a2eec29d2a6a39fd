"""A name a user gives (a folder, a trace, a snapshot, an output) that reads as rich markup is printed as it is, by
every command that runs without a GPU: never a MarkupError after files were written, never another name ('[red]b.xz'
shown as 'b'). Each path below holds '[/]', a closing tag with nothing to close, and '[red]', an opening one; the
console reads no markup at all (cli/args.console), so styles come from rich Text alone."""
from __future__ import annotations

import shutil

import pytest
from clirun import ROOT, in_process

TRACES = ROOT / "workloads" / "traces"
SNAPSHOT = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle"
PACKED = ROOT / "workloads" / "transformer-packed.yaml"
SETTINGS = ["--conf", "expandable_segments:True"]


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    """A folder 'o[' holding ']ut [red]' paths: their full names read 'o[/]ut [red]...'; a swept folder and its copy,
    two traces and a snapshot among them."""
    root = tmp_path_factory.mktemp("m") / "o["
    root.mkdir()
    for name, source in (("]ut [red]a.xz", TRACES / "transformer-packed-h200.xz"),
                         ("]ut [red]b.xz", TRACES / "llm-decode-h200.xz"), ("]ut [red]oom.pickle", SNAPSHOT)):
        shutil.copy(source, root / name)
    folder = root / "]ut [red]sweep"
    run = in_process("sweep", PACKED, "--preset", "h200", "--backend", "sim", *SETTINGS, "--out", folder,
                     env={"COLUMNS": "200"})
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert f"Results: {folder}/" in run.stdout, run.stdout
    shutil.copytree(folder, root / "]ut [red]copy")
    return root


@pytest.mark.parametrize("args, shown", [
    (["report", "{root}/]ut [red]sweep"], "{root}/]ut [red]sweep"),
    (["export", "{root}/]ut [red]sweep", "-o", "{root}/]ut [red]alloc.env"], "wrote {root}/]ut [red]alloc.env"),
    (["compare", "{root}/]ut [red]sweep", "{root}/]ut [red]copy", "-o", "{root}/]ut [red]cmp"], "┃ ]ut [red]copy "),
    (["replay", "{root}/]ut [red]a.xz", *SETTINGS], "{root}/]ut [red]a.xz: "),
    (["search", "{root}/]ut [red]a.xz", "--max-settings", "4", "--jobs", "1"], "{root}/]ut [red]a.xz: "),
    (["fleet", "{root}/]ut [red]a.xz", "{root}/]ut [red]b.xz", *SETTINGS, "--jobs", "1"], "job 2: ]ut [red]b"),
    (["fit", "--param", "batch", "--trace", "8={root}/]ut [red]a.xz", "--trace", "16={root}/]ut [red]b.xz",
      *SETTINGS, "--out", "{root}/]ut [red]fit", "--jobs", "1"], "Written to {root}/]ut [red]fit: fit.json"),
    (["diagnose", "{root}/]ut [red]oom.pickle"], "source: {root}/]ut [red]oom.pickle"),
])
def test_every_command_prints_a_name_that_reads_as_markup_as_it_is(marked, args, shown):
    run = in_process(*(a.format(root=marked) for a in args), env={"COLUMNS": "300"})
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "Markup" not in run.stdout + run.stderr
    assert shown.format(root=marked) in run.stdout + run.stderr, run.stdout + run.stderr


def test_a_table_is_measured_as_it_is_printed():
    """The widths that decide whether settings stand whole in a table read its cells as plain text, as the console
    prints them: a cell holding a user's path measures its full length, never a MarkupError."""
    from alloctune.report.tables import figures_table, natural_width

    def width(name: str) -> int:
        return natural_width(figures_table(["trace", "peak"], [[name, "1.0"]], title="", setting=0))

    assert width("o[/]ut [red]x.xz") == width("o" * len("o[/]ut [red]x.xz"))


def test_a_name_that_reads_as_tex_math_is_drawn_as_it_is(tmp_path):
    """A workload (a command's words: `sh -c 'train --bs $BS $X'`) or a folder named with '$...$' is a plot's title
    or a bar's label: never read as TeX math, where '$\\frac{$' stopped compare with a traceback after compare.md was
    written, and '$x_1$' drew another name."""
    from folders import make_folder, repeats

    name = "sh -c 'train $\\frac{$'"
    records = repeats("", workload=name) + repeats("expandable_segments:True", reserved=10.0, workload=name)
    folders = [make_folder(tmp_path / f"{side} $\\frac{{$", records, workload=name).path for side in "ab"]
    for args in (["report", folders[0]], ["compare", *folders, "-o", tmp_path / "c $x_{$"]):
        run = in_process(*args)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert (folders[0] / "plot.png").stat().st_size and (tmp_path / "c $x_{$" / "compare.png").stat().st_size

    from alloctune.report.plot import plain_text
    from matplotlib.figure import Figure

    with plain_text():   # as drawn: the text itself, no math in it
        drawn = Figure().text(0, 0, name)
        assert drawn.get_text() == name and drawn._preprocess_math(name) == (name, False)
