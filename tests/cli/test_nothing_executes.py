"""Nothing a user copies from alloctune's output executes anything (issue 19): every printed command is quoted for
a shell, whatever the folder is called, and a setting whose value a shell would not read literally is refused when
it is parsed, before the first trial, wherever it comes from."""
from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess

import pytest
from clirun import ROOT, cli, in_process
from folders import choice, make_folder, repeats

PACKED = ROOT / "workloads" / "transformer-packed.yaml"
HOSTILE = "r $(touch pwned-dollar) `touch pwned-tick` ;touch pwned-semi"   # spaces, and three ways to run code


def pasted(command: str, cwd) -> list[str]:
    """`command` pasted into bash in `cwd`, with `alloctune` a function that prints its arguments: what it got.
    Nothing may have run: no pwned-* file appears."""
    script = 'alloctune() { printf "%s\\n" "$@"; }\n' + command + "\n"
    out = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert not list(cwd.glob("pwned*")), f"pasting {command!r} ran code"
    return out.stdout.splitlines()


def line_after(text: str, prefix: str) -> str:
    """The command printed after `prefix`: on its line, or below it, broken over lines ending in '\\' (which a
    shell joins, as it does when the lines are pasted)."""
    lines = text.splitlines()
    [i] = [i for i, line in enumerate(lines) if line.startswith(prefix) or line == prefix.rstrip()]
    block = [lines[i][len(prefix):]] if lines[i].startswith(prefix) else [lines[i + 1]]
    i += 0 if lines[i].startswith(prefix) else 1
    while block[-1].endswith("\\"):
        i += 1
        block.append(lines[i])
    return "\n".join(block)


def test_the_commands_a_sweep_prints_survive_any_folder_name(tmp_path):
    folder = tmp_path / HOSTILE
    run = in_process("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--conf", "expandable_segments:True",
                     "--out", folder)
    assert run.returncode == 0, run.stderr
    assert pasted(line_after(run.stdout, "Next: "), tmp_path) == ["export", str(folder), "--format", "env", "-o",
                                                                  "alloc.env"]
    confirm = pasted(line_after(run.stdout, "Confirm on a GPU: "), tmp_path)
    assert confirm[confirm.index("--conf") + 1] == "expandable_segments:True" and confirm[-1] == "cuda"
    summary = (folder / "summary.md").read_text()
    [export] = [m.group(2).strip() for m in re.finditer(r"Export the choice: (`+)(.*?)\1 \(", summary)]
    assert pasted(export, folder.parent) == ["export", folder.name]


def test_the_replay_command_diagnose_suggests_survives_any_path(tmp_path):
    where = tmp_path / HOSTILE
    where.mkdir()
    snapshot = where / "oom-rank0.pickle"
    shutil.copy(ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle", snapshot)
    run = in_process("diagnose", snapshot, "--json")
    assert run.returncode == 0, run.stderr
    end = " --conf max_split_size_mb:512"   # the step quotes the command in backticks, which the path holds too
    [hint] = [step[step.index("`alloctune replay ") + 1:step.index(end) + len(end)]
              for step in json.loads(run.stdout)["next_steps"] if "`alloctune replay " in step]
    assert pasted(hint, tmp_path)[:2] == ["replay", str(snapshot)]


def test_the_report_command_a_busy_folder_suggests_survives_any_folder_name(tmp_path):
    folder = make_folder(tmp_path / HOSTILE, repeats("") + repeats("expandable_segments:True"),
                         [choice("expandable_segments:True")]).path
    with open(folder / ".lock", "a") as lock:   # held as a running sweep holds it
        fcntl.flock(lock, fcntl.LOCK_EX)
        run = cli("report", folder)
    assert run.returncode == 2 and "is being written by another" in run.stderr, run.stderr
    hint = run.stderr[run.stderr.index("`alloctune report ") + 1:run.stderr.index("` decides again")]
    assert pasted(hint, tmp_path) == ["report", str(folder)]


UNSAFE = ["expandable_segments:True,pinned_num_register_threads:1>FILE", "pinned_num_register_threads:$(touch x)",
          "pinned_num_register_threads:`touch x`", "pinned_use_cuda_host_register:True;touch x",
          "pinned_num_register_threads:'8'", "pinned_num_register_threads:${HOME}", "a$(touch x):1"]


@pytest.mark.parametrize("setting", UNSAFE)
def test_a_setting_a_shell_would_not_read_literally_is_refused_before_any_trial(tmp_path, setting):
    out = tmp_path / "results"
    run = in_process("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--conf", setting, "--out", out,
                     cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert "read literally" in run.stderr or "read it literally" in run.stderr
    assert not out.exists() and not list(tmp_path.iterdir())   # no folder, no trial, no FILE


def test_the_rule_holds_for_grid_files_workloads_replays_and_a_hand_edited_choice(tmp_path):
    setting = UNSAFE[0]
    grid = tmp_path / "grid.txt"
    grid.write_text(f"{setting}\n")
    workload = tmp_path / "w.yaml"
    trace = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
    workload.write_text(PACKED.read_text().replace("traces/transformer-packed-h200.xz", str(trace))
                        + f"\ngrid:\n  - '{setting}'\n")
    for args in (("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--grid", grid, "--out", tmp_path / "a"),
                 ("sweep", workload, "--preset", "h200", "--backend", "sim", "--out", tmp_path / "b"),
                 ("replay", trace, "--conf", setting), ("diagnose", ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag"
                                                        / "oom-rank0.pickle", "--conf", setting)):
        run = in_process(*args, cwd=tmp_path)
        assert run.returncode == 2 and "would not read literally" in run.stderr, (args, run.stderr)
        assert "Traceback" not in run.stderr
    folder = make_folder(tmp_path / "w-1", repeats("") + repeats("expandable_segments:True"),
                         [choice("expandable_segments:True")])
    data = json.loads((folder.path / "choice.json").read_text())
    data["choices"][0]["conf"] = setting
    (folder.path / "choice.json").write_text(json.dumps(data))
    run = in_process("export", folder.path, cwd=tmp_path)
    assert run.returncode == 2 and "field 'choices[0].conf'" in run.stderr and "literally" in run.stderr, run.stderr
    assert not (tmp_path / "FILE").exists()
