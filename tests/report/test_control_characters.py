"""Text from outside (a trace's metadata, a GPU's name, a path, a log) shown safely (issue 29): control characters
reach no terminal and no Markdown file raw (errors.printable, through every console's render hook and where lines
are printed), and every validating pattern matches the whole value (`--name $'a\\nb'` makes no folder)."""
from __future__ import annotations

import pytest
from clirun import ROOT, in_process
from folders import choice, make_folder, trial

from alloctune.errors import WorkloadError, printable
from alloctune.sim.trace import load_trace, save_trace
from alloctune.workload.builtin import entry_path
from alloctune.workload.command import is_python

CONTROLS = "G\x1b[2J\x1b]0;title\x07\x00\r\x08\x7f\x85\u202eX"
TRACE = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
LOG = (ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.txt").read_text()


def raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f
            or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069]


def test_printable_shows_every_control_as_one_character():
    every = "".join(map(chr, range(0x00, 0xa0))) + "".join(map(chr, range(0x202a, 0x202f))) + "\u2066\u2069"
    shown = printable(every)
    assert len(shown) == len(every) and raw_controls(shown) == []
    assert printable("a\x1bb\x00c\x07\x7f\x9b") == "a␛b␀c␇␡�"
    assert printable("tab\tand\nnewline, 'é', 24 GiB") == "tab\tand\nnewline, 'é', 24 GiB"


@pytest.fixture
def foreign(tmp_path):
    """A results folder named with an escape sequence whose trials name a GPU full of controls, and a trace whose
    metadata and path hold them too."""
    records = [trial(c, i) for c in ("", "expandable_segments:True") for i in range(3)]
    for r in records:
        r.env["gpu"] = CONTROLS
    folder = make_folder(tmp_path / "w\x1b[31m-1", records, [choice("expandable_segments:True")],
                         envs={"torch-2.11.0": {"torch": "2.11.0+cu130", "gpu": CONTROLS}})
    trace = load_trace(TRACE)
    trace.meta.update(gpu=CONTROLS, torch_version="2.11.0+" + CONTROLS)
    path = tmp_path / f"t{CONTROLS.replace(chr(0), '')}.xz"   # no file's name holds a NUL
    save_trace(trace, path)
    log = tmp_path / "oom\x1b[1m.log"
    log.write_text(f"[rank0]: {CONTROLS}\n" + LOG)
    return folder.path, path, log


def test_no_command_prints_a_control_character_raw(foreign, tmp_path):
    folder, trace, log = foreign
    for args in (["report", folder], ["compare", folder, folder, "-o", tmp_path / "c"], ["export", folder],
                 ["export", folder, "--format", "k8s"], ["replay", trace, "--conf", "expandable_segments:True"],
                 ["search", trace, "--max-settings", "3"], ["diagnose", log], ["replay", tmp_path / "x\x1b[2J"],
                 ["sweep", "--name", "a\x1bb", "--", "true"]):
        run = in_process(*args, env={"COLUMNS": "120"})
        assert run.returncode in (0, 2), (args[0], run.stderr)
        assert raw_controls(run.stdout + run.stderr) == [], (args[0], run.stdout + run.stderr)
    for md in (folder / "summary.md", tmp_path / "c" / "compare.md"):
        assert raw_controls(md.read_text()) == [] and "␛" in md.read_text(), md


def test_every_validating_pattern_matches_the_whole_value(tmp_path):
    run = in_process("sweep", "--name", "a\nb", "--backend", "sim", "--results", tmp_path, "--", "true")
    assert run.returncode == 2 and "--name 'a\\nb': expected letters" in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []
    for entry in ("pkg.mod:make\n", "file.py:make\n"):
        with pytest.raises(ValueError):
            entry_path(entry)
    assert is_python("/usr/bin/python3") and not is_python("/usr/bin/python3\n")
    (tmp_path / "w.yaml").write_text('name: "w\\n"\nkind: transformer\nsteps: 4\n')
    with pytest.raises(WorkloadError, match="key 'name'"):
        from alloctune.workload.loader import load_workload
        load_workload(tmp_path / "w.yaml")
