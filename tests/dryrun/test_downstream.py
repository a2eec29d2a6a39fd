"""What takes a dry run after `record --dry-run`: `sweep --dry-run -- CMD` (the command traced without a GPU in place
of the recording trial, every setting replayed, the plan a hybrid sweep would run on the GPU), and replay, search
and fleet of a dry run's trace, each saying where its figures come from. The command is the tiny transformer whose H100
recording is tests/fixtures/dryrun/gpt.xz (its dry run reproduces it event for event: test_dry_run.py), so the
sweep's predicted peaks are checked against the GPU's own trace replayed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clirun import ROOT, cli

from alloctune.dryrun import cards
from alloctune.results.folder import ResultsFolder
from alloctune.results.records import Backend
from alloctune.sim.trace import load_trace

FIXTURES = ROOT / "tests" / "fixtures" / "dryrun"
SETTINGS = ["expandable_segments:True", "max_split_size_mb:128"]
H100 = cards.CARDS["h100"].name


def replayed(*args) -> dict:
    done = cli("replay", *args, "--json", "--conf", "default", *[a for conf in SETTINGS for a in ("--conf", conf)])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, dict, str]:
    """`sweep --dry-run --json -- python3 examples/gpt_train.py ...` (the fixture's command): its folder, its JSON
    and what it said on standard error. The one dry run of this module (about 30 s here)."""
    folder = tmp_path_factory.mktemp("sweep") / "dry"
    command = load_trace(FIXTURES / "gpt.xz").meta["command"]
    done = cli("sweep", "--dry-run", *[a for conf in SETTINGS for a in ("--conf", conf)], "--out", folder, "--json",
               "--", sys.executable, *command, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads(done.stdout), done.stderr


@pytest.mark.slow
def test_a_sweeps_dry_run_replays_every_setting_to_the_gpus_peaks_and_says_so(swept):
    folder, said, _ = swept
    trials = ResultsFolder(folder).trials()
    assert trials and all(r.backend == Backend.SIM for r in trials)   # nothing ran on a GPU
    gpu = {r["conf"]: r["peak_reserved_bytes"] for r in replayed(FIXTURES / "gpt.xz")["results"]}
    assert {r.conf or "default": r.measurement.peak_reserved_bytes for r in trials} == gpu
    assert said["dry_run"]["card"] == H100 and said["dry_run"]["table"] == "torch 2.11 sm90"
    plan = said["gpu_plan"]
    [measured] = plan["measured"].values()   # the default first, by its name, as the text says it
    assert plan["trials"] >= 2 and measured[0] == "default" and set(measured[1:]) <= set(SETTINGS)
    assert ResultsFolder(folder).info().trace == {"path": "trace.xz", "recorded_in": "a dry run", "dry_run": "h100"}
    summary = (folder / "summary.md").read_text()
    assert f"Replayed from a dry run for {H100}" in summary and "nothing was measured" in summary
    assert "recorded on" not in summary   # the fake card is not a recording GPU
    choice = json.loads((folder / "choice.json").read_text())
    assert choice["choices"][0]["reasons_data"][0]["code"] == "dry_run"


@pytest.mark.slow
def test_the_sweeps_text_shows_the_plan_on_a_gpu_and_resumes_without_tracing_again(swept):
    folder, said, _ = swept
    command = load_trace(FIXTURES / "gpt.xz").meta["command"]
    done = cli("sweep", "--dry-run", *[a for conf in SETTINGS for a in ("--conf", conf)], "--out", folder,
               "--", sys.executable, *command, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dry run of the command" not in done.stderr   # resumed: the kept trace is replayed again
    out = done.stdout
    assert f"replayed from a dry run for {H100}" in out and "Nothing was measured" in out
    assert "On a GPU, a hybrid sweep of this command" in out
    # what the GPU measures, in the words as in the JSON (--json of the same sweep)
    [(_, measured)] = said["gpu_plan"]["measured"].items()
    beside = f" and {', '.join(sorted(measured[1:]))}" if measured[1:] else ""
    assert f"then the GPU measures the default{beside}." in out
    assert "(in the same environment: variables your command reads" in out   # the line does not carry them
    on_gpu = out[out.index("Confirm on a GPU:"):]
    assert "--backend hybrid -- " in on_gpu and "--dry-run" not in on_gpu


@pytest.mark.slow
def test_replay_search_and_fleet_say_a_trace_is_a_dry_run(swept):
    folder, _, _ = swept
    dry, gpu = folder / "trace.xz", FIXTURES / "gpt.xz"
    both = replayed(dry, gpu)
    assert [t["dry_run"] and t["dry_run"]["card"] for t in both["traces"]] == [H100, None]
    text = " ".join(cli("replay", dry, "--conf", "default", env={"COLUMNS": "200"}).stdout.split())
    assert f"a dry run for {H100} (table row torch 2.11 sm90)" in text and "Dry run (nothing measured)." in text
    assert "the card the dry run stands for" in text
    searched = cli("search", dry, "--max-settings", "8", "--json")
    assert searched.returncode == 0 and json.loads(searched.stdout)["dry_run"]["card"] == H100
    fleet = cli("fleet", dry, gpu, "--conf", "default", "--json")
    jobs = {j["job"]: j["dry_run"] for j in json.loads(fleet.stdout)["jobs"]}
    assert jobs["trace"]["card"] == H100 and jobs["gpt"] is None


@pytest.mark.parametrize("flags, says", [
    (["--arch", "h100", "--", sys.executable, "-c", "pass"], "--arch names the GPU a dry run stands for"),
    (["--dry-run", "workloads/transformer-varlen.yaml"], "--dry-run traces your own program"),
    (["--dry-run", "--backend", "cuda", "--", sys.executable, "-c", "pass"], "leave --backend cuda out"),
    (["--dry-run", "--arch", "sm12", "--", sys.executable, "-c", "pass"], "--arch 'sm12': a dry run knows"),
])
def test_what_a_sweeps_dry_run_cannot_do_is_refused_in_one_line(tmp_path, flags, says):
    done = cli("sweep", "--out", tmp_path / "s", *flags)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "s").exists()
