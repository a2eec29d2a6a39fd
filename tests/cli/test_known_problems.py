"""The table of known problems (settings/known.py), consulted through the command line (its main(), in this process)
with this machine's torch (CPU): the grid's skips in a sim sweep (sweep.json, --json, the closing lines,
summary.md), the search never proposing a pair known broken on the target torch, the choice of `report` refusing a
setting for a feature the job used and saying why with the source, and the variable `export` writes for each torch."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from clirun import in_process
from folders import make_folder, repeats

from alloctune.settings.conf import AllocConf
from alloctune.settings.known import PROBLEMS, forbidden_combination

ROOT = Path(__file__).resolve().parents[2]
HPSEARCH = ROOT / "workloads" / "hpsearch.yaml"
TRACE = ROOT / "workloads" / "traces" / "hpsearch-h200.xz"
TORCH = str(torch.__version__)
GROWTH_URL = "https://github.com/pytorch/pytorch/issues/123548"

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="exercises the no-GPU fallback (a sim sweep)")


@no_gpu
def test_a_sim_sweep_skips_a_known_broken_pair_with_the_entrys_reason_and_source(tmp_path):
    pair = "expandable_segments:True,max_split_size_mb:128"
    # this machine's torch told (--python): it judges the pair and is replayed (the trace was recorded under 2.11)
    proc = in_process("sweep", HPSEARCH, "--preset", "h200", "--conf", pair, "--conf", "expandable_segments:True",
               "--python", sys.executable, "--results", "out", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    problem = forbidden_combination(AllocConf.parse(pair), TORCH)
    # named by the user: said before anything runs
    assert f"you named {pair!r}, but it will not run: {problem.reason}" in _unwrapped(proc.stderr)
    assert problem is not None and problem.id == "expandable-max-split-growth"   # on torch 2.12 and later
    want = {"conf": pair, "reason": problem.reason, "env_id": f"sim:torch-{TORCH}", "problem": problem.id,
            "source": GROWTH_URL, "why": None}   # a settings rule's own text; no decision of the rounds
    assert json.loads(proc.stdout)["skipped"] == [want]
    [folder] = (tmp_path / "out").iterdir()
    assert json.loads((folder / "sweep.json").read_text())["skipped"] == [want]
    assert GROWTH_URL in (folder / "summary.md").read_text().split("## Skipped settings")[1]
    # the closing lines, as a terminal shows them
    text = in_process("sweep", HPSEARCH, "--preset", "h200", "--conf", pair, "--python", sys.executable, "--results",
                      "out2", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert f"skipped {pair} (sim:torch-{TORCH}): {problem.reason} " in _unwrapped(text.stdout)


def _unwrapped(text: str) -> str:
    """Terminal output with its lines joined again (rich folds long lines at the terminal's width)."""
    return " ".join(text.split()) + " "


def test_the_search_never_proposes_a_pair_known_broken_on_the_target_torch():
    # the target torch told (--python): this machine's, whose table has the pairs; the trace was recorded under 2.11
    proc = in_process("search", TRACE, "--max-settings", "60", "--budget", "0.5", "--jobs", "2", "--json",
                      "--python", sys.executable)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["torch_version"] == TORCH and data["rounds"] >= 1
    proposed = [c["conf"] for c in data["candidates"]] + [e for c in data["candidates"] for e in c["equivalent"]]
    # the refinement stepped from expandable segments, where max_split_size_mb and GC are the table's pairs
    assert any(AllocConf.parse(c).expandable_segments and len(AllocConf.parse(c).keys) > 1 for c in proposed)
    assert [c for c in proposed if forbidden_combination(AllocConf.parse(c), TORCH)] == []
    assert "garbage_collection_threshold:0.5" in proposed   # GC alone is searched under the budget


def test_report_refuses_a_setting_known_broken_for_a_feature_the_job_used(tmp_path):
    # the default's trials saw the job send CUDA tensors to another process; expandable segments saved the most
    records = ([replace(r, features=["cuda_ipc"]) for r in repeats("")] + repeats("expandable_segments:True",
                                                                                 reserved=9.0)
               + repeats("roundup_power2_divisions:4", reserved=12.0))
    folder = make_folder(tmp_path / "w-1", records)
    proc = in_process("report", folder.path, "--json")
    assert proc.returncode == 0, proc.stderr
    [[choice]] = [folder["choices"] for folder in json.loads(proc.stdout)]
    assert choice["conf"] == "roundup_power2_divisions:4" and choice["features"] == ["cuda_ipc"]
    refused = next(r for r in choice["runners_up"] if r["conf"] == "expandable_segments:True")
    ipc = next(p for p in PROBLEMS if p.id == "expandable-cuda-ipc-pidfd")
    assert refused["why_data"] == {"code": "known_problem", "figures": {
        "problem": ipc.id, "severity": "broken", "source": ipc.source, "torch_version": "2.11.0+cu130",
        "features": ["cuda_ipc"]}}
    assert ipc.source in refused["why"]
    assert [r["code"] for r in choice["reasons_data"]][-1] == "refused_unsafe"
    summary = (folder.path / "summary.md").read_text()
    assert ipc.source in summary.split("Why:")[1].split("|")[0]   # the reasons, before the table
    assert "Observed in the job (the start-up hook, every trial): it sent or received CUDA tensors" in summary
    terminal = _unwrapped(in_process("report", folder.path).stdout)
    assert "refused for what a short trial does not show: expandable_segments:True: known to break the job" in \
        terminal and ipc.source in terminal


@pytest.mark.parametrize("torch_version, warns", [("2.11.0+cu130", True), (TORCH, False)])
def test_export_writes_the_variable_the_target_torch_reads_first(tmp_path, torch_version, warns):
    records = repeats("", torch=torch_version) + repeats("expandable_segments:True", reserved=9.0,
                                                         torch=torch_version)
    folder = make_folder(tmp_path / "w-1", records)
    assert in_process("report", folder.path).returncode == 0
    proc = in_process("export", folder.path, "--format", "env")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [x for x in lines if not x.startswith("#")] == ["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    assert any("deprecation warning" in x and "issues/183387" in x for x in lines) == warns
