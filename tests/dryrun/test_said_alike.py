"""One dry run said alike by `record --dry-run`, `replay` and `sweep --dry-run` of the same command: which values it
made up (by kind, not only how many), and the torch its trace stands for on the card, the release of the torch
that traced it: a sweep's replays are named and simulated as that torch, not as the build that traced ('+cpu' ran on
no card)."""
from __future__ import annotations

import sys

import pytest
import torch

from clirun import cli

from alloctune.results.folder import ResultsFolder
from alloctune.sim.target import simulated_torch, simulated_with

pytestmark = pytest.mark.slow

# Reads three sums back (`.item()`: values made up) and sizes a tensor by its values (`nonzero`: a shape made up).
SCRIPT = """import torch
x = torch.ones(1 << 20, device="cuda")
for step in range(3):
    print(step, (x * 2).sum().item())
print(len(x.nonzero()))
"""


def said(done) -> str:
    assert done.returncode == 0, done.stderr[-3000:]
    return " ".join(done.stdout.split())   # unwrapped


def test_record_replay_and_sweep_say_one_dry_run_alike(tmp_path):
    script = tmp_path / "reads.py"
    script.write_text(SCRIPT)
    recorded = said(cli("record", "--dry-run", "-o", tmp_path / "t.xz", "--", sys.executable, script, timeout=600))
    swept = said(cli("sweep", "--dry-run", "--conf", "expandable_segments:True", "--out", tmp_path / "s", "--",
                     sys.executable, script, timeout=600))
    release = torch.__version__.split("+")[0]
    # what the dry run is, and what it made up, in record's words and the sweep's alike
    origin = recorded[recorded.index(": a dry run for ") + 2:recorded.index(", the requests torch")]
    assert origin.endswith("(table row torch 2.11 sm90; made up 4 values the script read from the GPU: item 3, shape 1)"), recorded   # one pair
    assert f"Nothing was measured: every figure is replayed from {origin}." in swept
    # one torch: record names it as replay does, the sweep's replays are named and simulated as its release
    assert f"the requests torch {simulated_torch(release)}'s caching allocator would see" in recorded
    assert simulated_with(torch.__version__) in said(cli("replay", tmp_path / "t.xz", "--conf", "default"))
    trials = ResultsFolder(tmp_path / "s").trials()
    assert {(t.env_id, t.env["simulated_as"]) for t in trials} == {(f"sim:torch-{release}", release)}
    assert f" · sim:torch-{release} · dry run" in swept
