"""What a newcomer hit (issue 18), each as the command line does it now: the folders `export --workload` could mean,
one a line; an interrupt after every file was written says where they are; a replay budget larger than the device
is warned of; compare writes only where asked and refuses different workloads; a user's sweeps land in a folder of their own, never the repository's
committed results/; a setting that takes (nearly) the whole card is called so; and the small wording."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

from clirun import ROOT, cli, in_process
from pids import hear_ctrl_c

from alloctune.results.folder import DEFAULT_RESULTS_ROOT

VARLEN = ROOT / "workloads" / "transformer-varlen.yaml"
TRACE = ROOT / "workloads" / "traces" / "transformer-varlen-h200.xz"
RESULTS = ROOT / "results"
NO_GPU = {"CUDA_VISIBLE_DEVICES": "", "COLUMNS": "80"}


def test_export_lists_the_folders_a_workload_could_mean_one_a_line(tmp_path):
    names = ["transformer-varlen-h200-20261129-234646", "transformer-varlen-h200-20261130-200216",
             "transformer-varlen-24gib-20261129-233651"]
    for name in names:
        shutil.copytree(RESULTS / name, tmp_path / name)
    proc = cli("export", tmp_path, "--workload", "transformer-varlen")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    first, *listed = proc.stderr.splitlines()
    assert first.startswith("alloctune: error: ") and first.endswith("give the folder itself, one of:")
    assert "--workload" not in first   # it was given: the folders are what is left to choose
    assert listed == [f"  {tmp_path / name}" for name in sorted(names)]
    proc = cli("export", tmp_path)
    assert proc.returncode == 2 and "choose one with --workload" in proc.stderr
    assert f"  {tmp_path / names[0]} (workload 'transformer-varlen')" in proc.stderr.splitlines()


def test_an_interrupt_after_every_file_was_written_says_where_they_are(tmp_path):
    # A real SIGINT, delivered while the sweep prints its tables: every file is written by then. raise_signal sends
    # it to this thread (os.kill may hand it to another of the process's threads, and the main one can finish first).
    code = ("import signal\n"
            "import alloctune.report.ranked as ranked\n"
            "ranked.print_choice = lambda *a, **k: signal.raise_signal(signal.SIGINT)\n"
            "from alloctune.cli.main import main\n"
            f"raise SystemExit(main(['sweep', {str(VARLEN)!r}, '--preset', 'h200', '--conf', "
            f"'expandable_segments:True', '--results', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT), **NO_GPU}, preexec_fn=hear_ctrl_c)
    [folder] = tmp_path.iterdir()
    assert proc.returncode == 130 and "Traceback" not in proc.stderr
    assert f"alloctune: interrupted; the sweep had finished; its results are in {folder}/" in \
        " ".join(proc.stderr.split()), proc.stderr
    assert {"summary.md", "best.env", "plot.png", "trials.jsonl", "choice.json"} <= {p.name for p in folder.iterdir()}


def test_a_replay_budget_larger_than_the_device_is_warned_of():
    proc = in_process("replay", TRACE, "--conf", "expandable_segments:True", "--budget", "200GiB", env=NO_GPU)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert ("warning: --budget 200.00 GiB is more than the device's 139.80 GiB (the recording GPU): the device runs "
            "out first, so the budget limits nothing") in text
    warnings = json.loads(in_process("replay", TRACE, "--conf", "expandable_segments:True", "--budget", "200GiB",
                                     "--device-memory", "150GiB", "--json").stdout)["warnings"]
    assert any("is more than the device's 150.00 GiB (--device-memory)" in w for w in warnings)
    fits = json.loads(in_process("replay", TRACE, "--conf", "expandable_segments:True", "--budget", "100GiB",
                                 "--json").stdout)["warnings"]
    assert not any("--budget" in w for w in fits)
    searched = in_process("search", TRACE, "--max-settings", "20", "--budget", "200GiB", "--json")
    assert any("is more than the device's" in w for w in json.loads(searched.stdout)["warnings"])


def test_compare_writes_only_where_asked(tmp_path):
    """Without -o, compare prints its table and writes nothing, in the current folder or anywhere; with -o DIR it
    writes compare.md and compare.png there and says so."""
    folder = RESULTS / "torch-2.1-vs-2.13-sim" / "transformer-varlen-h200"
    (tmp_path / "here").mkdir()
    proc = in_process("compare", folder, cwd=tmp_path / "here", env=NO_GPU)
    assert proc.returncode == 0 and "no significant change" in proc.stdout, proc.stderr
    assert list((tmp_path / "here").iterdir()) == [] and "wrote" not in proc.stdout + proc.stderr
    proc = in_process("compare", folder, "-o", "out", cwd=tmp_path / "here", env=NO_GPU)
    assert proc.returncode == 0, proc.stderr
    assert "wrote out/compare.md and out/compare.png" in " ".join(proc.stdout.split())
    assert sorted(p.name for p in (tmp_path / "here" / "out").iterdir()) == ["compare.md", "compare.png"]


def test_compare_refuses_folders_of_different_workloads_unless_forced(tmp_path):
    """Another workload, or the same one under another preset (another definition): one line naming both folders
    and what each holds, nothing written; --force compares them, every row incomparable."""
    base = RESULTS / "transformer-varlen-h200-20261129-234646"
    for other in (RESULTS / "detection-h200-20261129-235653", RESULTS / "transformer-varlen-24gib-20261129-233651"):
        proc = in_process("compare", base, other, "-o", tmp_path / "c", cwd=tmp_path, env=NO_GPU)
        assert proc.returncode == 2 and proc.stdout == "", proc
        [line] = proc.stderr.splitlines()
        assert line.startswith(f"alloctune: error: {base} (transformer-varlen-h200, ") and f"{other} (" in line
        assert "different workloads" in line and line.endswith("--force compares them anyway")
        assert not (tmp_path / "c").exists()
    forced = in_process("compare", base, other, "--force", "--json", cwd=tmp_path, env=NO_GPU)
    assert forced.returncode == 0, forced.stderr
    assert {d["mark"] for row in json.loads(forced.stdout)["rows"] for d in row["deltas"][1:]} == {"incomparable"}


def test_a_users_sweeps_go_to_a_folder_of_their_own(tmp_path):
    """Run where the README's set-up command runs it, in a checkout (here a copy of its workloads and results/):
    the sweep lands in alloctune-results/, which git ignores, and the committed results/ stays as it was."""
    shutil.copytree(ROOT / "workloads", tmp_path / "workloads")
    (tmp_path / "results").mkdir()
    proc = in_process("sweep", "workloads/transformer-varlen.yaml", "--preset", "h200", "--conf",
                      "expandable_segments:True", cwd=tmp_path, env=NO_GPU)
    assert proc.returncode == 0, proc.stderr
    [folder] = (tmp_path / DEFAULT_RESULTS_ROOT).iterdir()
    assert folder.name.startswith("transformer-varlen-h200-") and not any((tmp_path / "results").iterdir())
    assert f"Results: {DEFAULT_RESULTS_ROOT}/{folder.name}/" in proc.stdout
    assert f"/{DEFAULT_RESULTS_ROOT}/" in (ROOT / ".gitignore").read_text().split()


def test_a_setting_that_takes_the_whole_card_is_called_so(tmp_path):
    proc = in_process("sweep", VARLEN, "--preset", "h200", "--conf", "max_split_size_mb:128", "--results", tmp_path,
                      env={**NO_GPU, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    [row] = [line for line in proc.stdout.splitlines() if line.startswith(" max_split_size_mb:128 ")]
    assert row.split()[1:3] == ["whole", "card"] and "139.04 GiB" in row
    said = ("max_split_size_mb:128 took (nearly) the whole card: peak reserved 139.04 GiB of its 139.80 GiB, so it "
            "fits only because nothing else runs on the card")
    assert said in " ".join(proc.stdout.split())
    [folder] = tmp_path.iterdir()
    assert f"- {said}" in (folder / "summary.md").read_text()
    assert "| max_split_size_mb:128 | whole card | 139.04 GiB |" in (folder / "summary.md").read_text()
    [choice] = json.loads((folder / "choice.json").read_text())["choices"]
    [card] = [r["figures"] for r in choice["reasons_data"] if r["code"] == "whole_card"]   # as data too
    assert card["device_bytes"] == 150109880320 and [s["conf"] for s in card["settings"]] == ["max_split_size_mb:128"]


def test_small_wording():
    for command in ("sweep", "record"):
        usage = cli(command, "--help").stdout
        assert "... ..." not in usage and "-- COMMAND ...]" in usage, usage
    diagnosed = in_process("diagnose", ROOT / "tests/fixtures/oom/public/v2_1-shortage.txt").stdout
    assert "GPU g" not in diagnosed and "message: torch 2.1 ('GPU 0 has a total capacty of ...', spelt so)" in diagnosed
    one = cli("compare", RESULTS / "transformer-varlen-h200-20261129-234646")
    assert one.returncode == 2 and "holds 1 environment with trials" in one.stderr


def test_search_shows_progress_where_its_output_is_not_a_terminal(tmp_path):
    """A line at its first count, at each quarter it passes and at its last: the same lines on every run."""
    from scaled import scaled_trace

    from alloctune.sim.trace import save_trace

    save_trace(scaled_trace(8), tmp_path / "job.xz")
    said = []
    for _ in range(2):
        run = in_process("search", tmp_path / "job.xz", "--max-settings", "40", "--jobs", "1", env=NO_GPU)
        assert run.returncode == 0, run.stderr
        said.append([line for line in run.stderr.splitlines() if line.startswith("replays: ")])
        counts = [tuple(map(int, line.split()[1].rstrip(",").split("/"))) for line in said[-1]]
        assert 2 <= len(counts) <= 6 and counts == sorted(set(counts)) and counts[-1] == (40, 40), run.stderr
        assert "━" not in run.stderr
    assert said[0] == said[1]
