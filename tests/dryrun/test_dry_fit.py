"""`alloctune fit --dry-run -- CMD`: each value of the parameter traced by a dry run (no GPU), each answer's value and
the next traced too, so that every answer comes from a dry run's replay; the output, --json and fit.json say the
answers are a dry run's for the card. The command is the tiny transformer whose H100 recording at batch 4 is
tests/fixtures/dryrun/gpt.xz (its dry run is the GPU's event for event: test_dry_run.py), so the fit's point at batch
4 is checked against the GPU's own trace replayed; and the largest batch under a budget, from the dry runs of the
`autocast` evidence job, against the one from its H100 recordings (results/h100-dryrun-2026-12-06/, NOTE.md)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from clirun import ROOT, cli

from alloctune.dryrun import cards
from alloctune.results.fits import FitFile
from alloctune.sim.trace import load_trace

FIXTURES = ROOT / "tests" / "fixtures" / "dryrun"
EVIDENCE = ROOT / "results" / "h100-dryrun-2026-12-06"
H100 = cards.CARDS["h100"].name
SETTINGS = ["default", "expandable_segments:True"]
BUDGET = "100MiB"   # the tiny transformer reserves 72 MiB at batch 4 and 142 MiB at batch 64 under the default


def tiny_command() -> list[str]:
    """The fixture's command with {batch} where its batch went."""
    command = load_trace(FIXTURES / "gpt.xz").meta["command"]
    at = command.index("--batch") + 1
    return [sys.executable, *command[:at], "{batch}", *command[at + 1:]]


def fit(*args, param: str = "batch", **kw):
    return cli("fit", "--param", param, *[a for conf in SETTINGS for a in ("--conf", conf)], "--jobs", "1", *args,
               **kw)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> tuple[Path, dict, str]:
    """`fit --dry-run --param batch=4,16,64 --budget 100MiB --json -- CMD`: its folder, its JSON and what it said
    on standard error. The dry runs of this module (five of the tiny model, about a minute here)."""
    folder = tmp_path_factory.mktemp("fit") / "dry"
    done = cli("fit", "--param", "batch=4,16,64", "--dry-run", "--budget", BUDGET,
               *[a for conf in SETTINGS for a in ("--conf", conf)], "--jobs", "1", "--out", folder, "--json", "--",
               *tiny_command(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads(done.stdout), done.stderr


@pytest.mark.slow
def test_a_fits_dry_run_traces_every_answer_and_says_so(fitted):
    folder, said, progress = fitted
    assert said["dry_run"]["card"] == H100 and said["dry_run"]["table"] == "torch 2.11 sm90"
    assert json.loads((folder / "fit.json").read_text())["dry_run"] == said["dry_run"]
    answers = [a for limit in said["limits"] for a in limit["answers"]]
    assert answers and all(a["exact"] for a in answers)   # every value that decides was traced: no curve needed
    assert {4, 16, 64} < set(said["values"]) and said["exact"]["values"]
    for name in said["traces"]:   # each a dry run's trace, none a GPU's
        assert load_trace(name).meta["dry_run"]["card"] == H100 and load_trace(name).meta["measured"] == []
    assert "dry run (no GPU)" in progress and "recording" not in progress
    gpu = cli("replay", FIXTURES / "gpt.xz", "--json", *[a for conf in SETTINGS for a in ("--conf", conf)])
    on_gpu = {r["conf"]: r["peak_reserved_bytes"] for r in json.loads(gpu.stdout)["results"]}
    at_4 = {s["conf"]: next(p["unlimited_peak_reserved_bytes"] for p in s["points"] if p["value"] == 4)
            for s in said["settings"]}
    assert at_4 == on_gpu   # the dry run's point at batch 4 is the GPU's recording replayed


@pytest.mark.slow
def test_the_fits_text_says_dry_run_and_runs_again_without_tracing(fitted):
    folder, said, _ = fitted
    done = fit("--budget", BUDGET, "--dry-run", "--out", folder, "--", *tiny_command(), param="batch=4,16,64",
               env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kept dry run" in done.stderr and "dry run (no GPU)" not in done.stderr   # nothing traced again
    text = " ".join(done.stdout.split())
    assert f"by a dry run for {H100} (table row torch 2.11 sm90): nothing was measured" in text
    assert f"Dry run (nothing measured). Under budget {BUDGET}" in text and f"of the {H100} the dry run" in text
    # every answer here is exact, from the dry runs' replays: it said 'every answer is predicted'
    assert " replays " in text and "predicted" not in text and "the dry runs measured nothing" in text
    assert said["overhead_from"] == "table"   # the card's context, from the dry run's table: not measured
    stored = FitFile.from_json(json.loads((folder / "fit.json").read_text()))   # --json: its shared names
    assert stored.shared_json(said["simulated_torch"])["limits"] == said["limits"]


@pytest.mark.slow
def test_the_largest_batch_by_dry_run_is_the_gpus(tmp_path):
    """The `autocast` job (examples/gpt_train.py --autocast) at batches 4-24: under a budget between batch 12's
    peak and batch 16's, the dry runs' fit answers the batch the H100 recordings' fit answers, and says it is a
    dry run's."""
    batches = [4, 8, 12, 16, 24]

    def largest(kind: str) -> tuple[dict, dict]:
        done = fit(*[a for b in batches for a in ("--trace", f"{b}={EVIDENCE / kind / f'autocast-b{b}.xz'}")],
                   "--budget", "12GiB", "--step", "2", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        answer = json.loads(done.stdout)
        return {a["conf"]: a["largest"] for a in answer["limits"][0]["answers"]}, answer

    on_gpu, gpu = largest("gpu")
    by_dry_run, dry = largest("dry")
    assert by_dry_run == on_gpu and set(on_gpu.values()) == {12}
    assert gpu["dry_run"] is None and dry["dry_run"]["card"] == H100


@pytest.mark.parametrize("flags, says", [
    (["--arch", "h100", "--", sys.executable, "-c", "pass"], "--arch names the GPU a dry run stands for"),
    (["--dry-run", "--trace", f"4={FIXTURES / 'gpt.xz'}", "--trace", f"8={FIXTURES / 'gpt-varlen.xz'}"],
     "--dry-run traces your command at each value"),
    (["--dry-run", "--budget", "1GiB", "--confirm", "default", "--", sys.executable, "-c", "pass"],
     "--confirm runs answers on the GPU and --dry-run uses none"),
    (["--dry-run", "--arch", "sm12", "--", sys.executable, "-c", "pass"], "--arch 'sm12': a dry run knows"),
    (["--trace", f"4={FIXTURES / 'gpt.xz'}", "--trace", f"8={EVIDENCE / 'dry' / 'fixtures' / 'gpt.xz'}"],
     "--trace: the traces mix dry runs (1) and recordings made on a GPU (1): fit traces of one kind"),
])
def test_what_a_fits_dry_run_cannot_do_is_refused_in_one_line(tmp_path, flags, says):
    done = fit("--out", tmp_path / "f", *flags, param="batch=1,2" if "--" in flags else "batch")
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "f").exists()


def test_a_fit_folder_of_gpu_recordings_is_not_taken_for_dry_runs(tmp_path):
    """A dry run's fit in a folder that holds a GPU recording refuses it rather than fit the two kinds together."""
    folder = tmp_path / "fit"
    folder.mkdir()
    shutil.copy(FIXTURES / "gpt.xz", folder / "trace.batch-4.xz")
    done = fit("--dry-run", "--out", folder, "--", *tiny_command(), param="batch=4,8")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"is recorded on a GPU, and this fit makes dry runs for {H100}" in done.stderr
