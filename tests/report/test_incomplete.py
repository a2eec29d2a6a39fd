"""`alloctune report` on an interrupted sweep says so (summary, choice.json, terminal), `export` refuses such a
choice unless told --allow-incomplete (and no best.env holds it), and `report --max-slowdown` leaves sweep.json
(what was asked) alone."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import in_process

import alloctune
from alloctune.decide.planned import planned_trials, recorded_trials
from alloctune.errors import ResultsError
from alloctune.results.folder import ResultsFolder

ROOT = Path(__file__).resolve().parents[2]
HPSEARCH = ROOT / "workloads" / "hpsearch.yaml"
# Committed H200 sweeps that ran to the end.
FINISHED = ["hpsearch-h200-20261129-235903", "transformer-varlen-h200-20261129-234646",
            "torch-2.1-vs-2.13-sim/transformer-varlen-h200"]

no_gpu = pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU fallback, on any machine


@pytest.mark.parametrize("name", FINISHED)
def test_finished_sweeps_recorded_every_planned_trial(name):
    folder = ResultsFolder(ROOT / "results" / name)
    info, records = folder.info(), folder.trials()
    groups = {(r.env_id, r.backend) for r in records}
    assert groups and all(recorded_trials(records, *g) == planned_trials(info, *g) for g in groups)


@pytest.mark.slow
@no_gpu
def test_report_on_an_interrupted_sweep_says_it_is_incomplete_and_export_refuses_it(tmp_path):
    grid = ["expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"]
    outcome = alloctune.sweep(HPSEARCH, preset="h200", grid=grid, results_root=tmp_path)
    folder = outcome.folder.path
    assert json.loads((folder / "choice.json").read_text())["choices"][0]["complete"] is True
    assert json.loads((folder / "sweep.json").read_text())["finished"] is True
    # Interrupted after 2 of its 4 trials: no choice yet.
    lines = (folder / "trials.jsonl").read_text().splitlines(keepends=True)
    (folder / "trials.jsonl").write_text("".join(lines[:2]))
    (folder / "choice.json").unlink()
    asked = (folder / "sweep.json").read_bytes()

    proc = in_process("report", folder, "--max-slowdown", "0.10")
    assert proc.returncode == 0, proc.stderr
    assert "INCOMPLETE: 2 of 4 planned trials recorded" in proc.stdout
    [choice] = json.loads((folder / "choice.json").read_text())["choices"]
    assert (choice["complete"], choice["trials_recorded"], choice["trials_planned"]) == (False, 2, 4)
    assert choice["max_slowdown"] == 0.10                          # the override lives with the decision
    assert (folder / "sweep.json").read_bytes() == asked            # what was asked is untouched
    summary = (folder / "summary.md").read_text()
    assert "INCOMPLETE: 2 of 4 planned trials recorded" in summary and "max slowdown (10%" in summary
    assert not (folder / "best.env").exists()   # the finished sweep's is gone: an env file is never incomplete

    refused = in_process("export", folder)
    assert refused.returncode == 2 and "or pass --allow-incomplete to export" in refused.stderr
    with pytest.raises(ResultsError, match="or pass allow_incomplete=True to export"):   # a Python caller's name
        alloctune.export_results(folder)
    assert len(refused.stderr.strip().splitlines()) == 1
    allowed = in_process("export", folder, "--allow-incomplete")
    assert allowed.returncode == 0 and "INCOMPLETE sweep (2 of 4 planned trials recorded)" in allowed.stdout


def test_a_sweep_that_stopped_before_its_end_is_incomplete_where_no_count_was_planned(tmp_path):
    """--repeats auto and hybrid sweeps plan no trial count: sweep.json's `finished` (False until the sweep's end)
    is what says an interrupted one is incomplete. A folder from before it was kept has none: finished, as then."""
    import shutil

    folder = Path(shutil.copytree(ROOT / "tests" / "fixtures" / "sweeps" / "hf-trainer-cut", tmp_path / "hf"))
    info = json.loads((folder / "sweep.json").read_text())
    assert info["auto_repeats"] and info["finished"] is False   # cut by the evidence run's time cap
    proc = in_process("report", folder)
    assert proc.returncode == 0, proc.stderr
    assert "INCOMPLETE: stopped before its end, after 11 trials" in " ".join(proc.stdout.split())
    assert not (folder / "best.env").exists()
    refused = in_process("export", folder)
    assert refused.returncode == 2 and "the sweep is incomplete (stopped before its end, after 11 trials)" in \
        refused.stderr
    del info["finished"]   # as an alloctune from before the flag wrote it
    (folder / "sweep.json").write_text(json.dumps(info))
    assert in_process("report", folder).returncode == 0
    assert json.loads((folder / "choice.json").read_text())["choices"][-1]["complete"] is True


@no_gpu
def test_a_resumed_sweep_is_unfinished_until_its_end(tmp_path):
    """A folder written before sweep.json said whether a sweep finished (read as finished), resumed and cut again:
    sweep.json now says it did not finish, so its report is INCOMPLETE."""
    grid = ["expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"]
    folder = alloctune.sweep(HPSEARCH, preset="h200", grid=grid, results_root=tmp_path).folder.path
    info = json.loads((folder / "sweep.json").read_text())
    del info["finished"]
    (folder / "sweep.json").write_text(json.dumps(info))
    lines = (folder / "trials.jsonl").read_text().splitlines(keepends=True)
    (folder / "trials.jsonl").write_text("".join(lines[:2]))
    (folder / "choice.json").unlink()

    def cut(*_):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        alloctune.sweep(HPSEARCH, preset="h200", grid=grid, results_root=tmp_path, progress=cut)
    assert json.loads((folder / "sweep.json").read_text())["finished"] is False
