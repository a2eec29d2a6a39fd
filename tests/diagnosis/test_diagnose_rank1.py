"""A rank-1 OOM, as `alloctune.dump_on_oom` left it on the H200 (issue 21, on one GPU): `torchrun --nproc-per-node 2
scripts/jobs/rank1_oom.py` (the `rank1-oom` evidence job) with both ranks on GPU 0, each held to a fifth of the card;
rank 1 kept a step's output alive every step until a 92 MiB request no longer fitted (results/h200-own-job-2026-12-01/oom/, its log beside it).
The fixture is that run's snapshot and message, as written."""
from __future__ import annotations

import json
from pathlib import Path

from clirun import in_process
from snapshots import read_snapshot

from alloctune.diagnosis import diagnose
from alloctune.units import GiB

RANK1 = Path(__file__).resolve().parents[1] / "fixtures" / "oom" / "h200" / "rank1"


def test_the_snapshot_is_rank_1s_and_names_its_device_and_budget():
    oom = read_snapshot(RANK1 / "oom-rank1.pickle")["alloctune"]["oom"]
    assert (oom["rank"], oom["device"]) == (1, 0)
    assert oom["allowed_bytes"] == oom["limit_bytes"] and 0.19 < oom["allowed_bytes"] / (139.8 * GiB) < 0.21


def test_diagnose_reads_rank_1s_oom_with_the_other_rank_as_another_process():
    d = diagnose(RANK1 / "oom-rank1.pickle")
    assert d.verdict is not None and d.verdict.cause == "fragmentation" and d.verdict.sure
    numbers = d.verdict.numbers
    assert numbers["requested"] == 95666176   # the message's 92.00 MiB request, rounded as the allocator rounds it
    # rank 0, on the same GPU, is the "Process 3058 has 9.42 GiB memory in use" of rank 1's message
    assert round(numbers["other_processes"] / GiB, 2) == 9.42
    assert d.recommended_conf == "expandable_segments:True"   # the replay under it fits
    assert [Path(s).name for s in d.sources] == ["oom-rank1.pickle", "oom-rank1.txt"]


def test_the_cli_reads_it_in_one_go():
    run = in_process("diagnose", "--json", RANK1 / "oom-rank1.pickle")   # what it prints is the subject
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["verdict"]["cause"] == "fragmentation"
