"""Every command's output fits COLUMNS (80 and 100; 80 when it is unset and the output is not a terminal; the
terminal's own width in a terminal), and nothing breaks inside a word: a path, an environment id, a number with its
unit stand whole on one line; a setting too long for a table is folded in its cell between its keys (never inside a
key's value: a list's values stay on one line), numbered and given whole below only where even that does not fit,
the same in every table of an output; and the commands to copy read back, as a shell reads them, as the command they
name."""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import struct
import subprocess
import sys
import termios

import pytest
from clirun import ROOT, in_process, suggested

from alloctune.decide.summary import summarize_settings
from alloctune.results.folder import ResultsFolder
from alloctune.units import format_bytes

HYBRID = ROOT / "results" / "h200-search-2026-12-01" / "work-part4" / "transformer-varlen-hybrid"   # search-made
MEASURED = ROOT / "results" / "transformer-varlen-h200-20261129-234646"   # 3 repeats, flags, every column
TORCHES = ROOT / "results" / "torch-2.1-vs-2.13-sim" / "transformer-varlen-h200"   # skips with long reasons
VARLEN = ROOT / "workloads" / "transformer-varlen.yaml"
TRACE = ROOT / "workloads" / "traces" / "transformer-varlen-h200.xz"
LONG = ["roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        "expandable_segments:True,roundup_power2_divisions:[1:1,16:16,256:16,512:16]"]
WIDTHS = [80, 100, None]   # None: COLUMNS unset, output piped: 80


@pytest.fixture
def run(monkeypatch):
    """`run(columns, *args)`: the command line in this process (clirun.in_process), with COLUMNS set to `columns`
    (None: unset) and no GPU visible; its standard output and error (not a terminal). How wide the output is follows
    from COLUMNS and the stream alone (report/layout.py), so a fresh interpreter would print the same."""
    def run(columns, *args) -> tuple[str, str]:
        monkeypatch.delenv("COLUMNS", raising=False)
        proc = in_process(*args, env={"CUDA_VISIBLE_DEVICES": "", **({"COLUMNS": str(columns)} if columns else {})})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout, proc.stderr

    return run


def fits(text: str, width: int) -> None:
    """Every line within `width`, but one that holds a single word longer than the room (after a label or a
    number such as '(1)', before a command's continuing backslash): a word is never broken, so it stands whole on
    a line of its own."""
    for line in text.splitlines():
        words = line.removesuffix(" \\").split()
        assert len(line) <= width or (len(words) <= 2 and len(words[-1]) > width // 2), \
            f"{len(line)} > {width}: {line!r}"


def whole(text: str, *words: str) -> None:
    """Each of `words` on one line, unbroken (a word broken over two lines is found on none)."""
    for word in words:
        assert any(word in line for line in text.splitlines()), word


def named(text: str, *settings: str) -> None:
    """Each of `settings` whole on one line, or folded between its keys onto the lines below it, at one column (a
    table's cell)."""
    lines = text.splitlines()
    for setting in settings:
        assert any(setting in line for line in lines) or any(_folded(lines, i, setting) for i in range(len(lines))), \
            setting


def _folded(lines: list[str], i: int, setting: str) -> bool:
    for word in re.finditer(r"\S+", lines[i]):
        piece, rest, column = word.group(), setting, word.start()
        for below in lines[i + 1:]:
            read = setting[:len(setting) - len(rest) + len(piece)]   # a break inside brackets splits a value
            between_keys = piece.endswith(",") and read.count("[") == read.count("]")
            if not (rest.startswith(piece) and (piece == rest or between_keys)):
                break
            rest = rest[len(piece):]
            if not rest:
                return True
            if below[column - 1:column].strip() or not below[column:].split():   # the cell's column, no other
                break
            piece = below[column:].split()[0]
        else:
            if piece == rest:
                return True
    return False


def numbered_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.fullmatch(r"\s*\(\d+\) \S+", line)]


def width_of(columns) -> int:
    return columns or 80


def figures(folder) -> list[str]:
    """Every setting's peak as the tables print it (peak reserved, or the driver's figure where backends differ)."""
    return [format_bytes(s.memory) for s in summarize_settings(ResultsFolder(folder).trials())
            if s.memory is not None]


@pytest.mark.parametrize("columns", WIDTHS)
def test_report_of_a_hybrid_sweep_with_settings_the_search_made(run, tmp_path, columns):
    folder = shutil.copytree(HYBRID, tmp_path / "hybrid")
    out, _ = run(columns, "report", folder)
    fits(out, width_of(columns))
    settings = {r.conf or "default" for r in ResultsFolder(folder).trials()}
    named(out, *settings)
    whole(out, *figures(folder), "sim:torch-2.11.0+cu130", str(folder))
    assert not numbered_lines(out)   # the longest, too wide beside the figures at 80 columns, is folded


@pytest.mark.parametrize("columns", WIDTHS)
def test_report_of_a_measured_sweep(run, tmp_path, columns):
    folder = shutil.copytree(MEASURED, tmp_path / MEASURED.name)
    out, _ = run(columns, "report", folder)
    fits(out, width_of(columns))
    named(out, LONG[0])
    whole(out, "backend:cudaMallocAsync", *figures(folder), "tokens/s")


@pytest.mark.parametrize("columns", WIDTHS)
def test_compare_breaks_no_value(run, tmp_path, columns):
    out, _ = run(columns, "compare", TORCHES, "-o", tmp_path)
    fits(out, width_of(columns))
    whole(out, "sim:torch-2.1.2+cu121", "sim:torch-2.13.0+cpu", "torch-2.1.2+cu121", "2.11.0+cu130",
          "incomparable", "no significant change", "max_non_split_rounding_mb", "139.04 GiB",
          str(tmp_path / "compare.md"))
    named(out, "expandable_segments:True", "garbage_collection_threshold:0.2", LONG[0])


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("source", ["tests/fixtures/oom/h200/frag/oom-rank0.pickle",
                                    "tests/fixtures/oom/public/v2_1-shortage.txt"])
def test_diagnose(run, columns, source):
    out, _ = run(columns, "diagnose", ROOT / source)
    fits(out, width_of(columns))
    whole(out, str(ROOT / source), "1.95 GiB" if "frag" in source else "32.00 GiB")
    if "frag" in source:
        whole(out, LONG[0], "expandable_segments:True", "--budget 4500MiB")


@pytest.mark.parametrize("columns", WIDTHS)
def test_replay_and_the_maximum_over_traces(run, columns):
    out, _ = run(columns, "replay", TRACE, *(f"--conf={c}" for c in ["expandable_segments:True", *LONG]),
                 "--min-memory", "--jobs", "1")
    fits(out, width_of(columns))
    named(out, *LONG, "default")
    whole(out, "26.87", str(TRACE))
    other = ROOT / "workloads" / "traces" / "hpsearch-h200.xz"
    out, _ = run(columns, "replay", TRACE, other, f"--conf={LONG[0]}", "--jobs", "1")
    fits(out, width_of(columns))
    named(out, LONG[0])
    whole(out, f"trace #1: {TRACE}", f"trace #2: {other}")


def test_a_list_value_is_never_broken_at_80_columns(run):
    """At 80 columns roundup_power2_divisions:[256:1,512:2,1024:4,>:8] does not fit whole beside replay's figures
    (it was split after '[256:1,'): the table numbers it and gives it whole below, as docs/cli.md says."""
    traces = [ROOT / "tests" / "fixtures" / "fits" / f"gpt2-h100-batch-{n}.xz" for n in (2, 4)]
    out, _ = run(80, "replay", *traces, "--jobs", "1")
    fits(out, 80)
    assert "roundup_power2_divisions:[256:1,\n" not in "\n".join(line.rstrip() for line in out.splitlines())
    assert f"  (1) {LONG[0]}" in out.splitlines()
    named(out, LONG[0], "roundup_power2_divisions:4", "expandable_segments:True")


@pytest.mark.parametrize("columns", WIDTHS)
def test_search(run, columns):
    out, _ = run(columns, "search", TRACE, "--max-settings", "30", "--jobs", "1")
    fits(out, width_of(columns))
    whole(out, "expandable_segments:True,large_segment_size_mb:16", "26.86 GiB")


@pytest.mark.parametrize("columns", WIDTHS)
def test_a_sweep_its_progress_tables_and_the_commands_it_suggests(run, tmp_path, columns):
    out, err = run(columns, "sweep", VARLEN, "--preset", "h200", *(f"--conf={c}" for c in LONG),
                   "--results", tmp_path / "a-results-root-with-a-long-name-to-make-the-folder-path-long")
    width = width_of(columns)
    fits(out, width)
    fits(err, width)   # progress: short plain lines, no bar drawn in a log
    assert "━" not in err and "replaying settings: 3/3" in err
    [folder] = (tmp_path / "a-results-root-with-a-long-name-to-make-the-folder-path-long").iterdir()
    whole(out, *LONG, f"{folder}/", "26.76 GiB")
    assert suggested(out, "Next:") == ["alloctune", "export", str(folder), "--format", "env", "-o", "alloc.env"]
    assert suggested(out, "Confirm on a GPU:")[-2:] == ["--backend", "cuda"]


def test_a_terminal_of_its_own_width():
    """In a terminal (COLUMNS unset), the terminal's width."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 90, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-m", "alloctune", "diagnose",
                             ROOT / "tests/fixtures/oom/h200/frag/oom-rank0.pickle"],
                            stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:   # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    lines = b"".join(chunks).decode().replace("\r\n", "\n").splitlines()
    longest = max(map(len, lines))
    assert 80 < longest <= 90, longest
