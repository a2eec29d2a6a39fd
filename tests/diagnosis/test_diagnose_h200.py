"""`alloctune diagnose` on real OOMs made on purpose on an H200 (torch 2.11, scripts/h200_oom.sh): one of each
cause, each read from the message alone, from the snapshot alone and from both; the fragmentation case's
replay against the GPU run that confirmed it; the mid-run trace against the whole one.

Fixtures (tests/fixtures/oom/h200/<case>/): oom-rank0.pickle and oom-rank0.txt as alloctune.dump_on_oom left
them, result.json as scripts/jobs/oom_case.py wrote it (the exception's text, memory_stats after the OOM).
"""
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from snapshots import read_snapshot

from alloctune.diagnosis import diagnose
from alloctune.sim.rebuilt import reconstruct

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "tests" / "fixtures" / "oom" / "h200"
GiB, MiB = 2**30, 2**20
CAUSES = {"shortage": "shortage", "budget": "budget", "frag": "fragmentation", "frag-window": "fragmentation",
          "other": "other-processes"}


def result(case: str) -> dict:
    return json.loads((H200 / case / "result.json").read_text())


@pytest.mark.parametrize("case", sorted(CAUSES))
def test_each_cause_from_the_message_alone(case):
    d = diagnose(H200 / case / "oom-rank0.txt")
    assert d.message.format.startswith("torch 2.2+")
    assert (d.verdict.cause, d.verdict.sure) == (CAUSES[case], True)
    # the text dump_on_oom saved is the exception's own
    assert (H200 / case / "oom-rank0.txt").read_text() == result(case)["message"]


@pytest.mark.parametrize("case", sorted(CAUSES))
def test_each_cause_from_the_snapshot_alone(case, tmp_path):
    alone = tmp_path / "snapshot.pickle"  # no message beside it
    shutil.copy(H200 / case / "oom-rank0.pickle", alone)
    d = diagnose(alone)
    assert d.message is None and (d.verdict.cause, d.verdict.sure) == (CAUSES[case], True)
    # the snapshot's exact figures agree with what the process measured after the OOM
    stats = result(case)["stats"]
    assert d.facts.allocated == stats["allocated_bytes.all.current"]
    assert d.facts.reserved == stats["reserved_bytes.all.current"]
    assert d.facts.device_total == result(case)["device_total_bytes"]


@pytest.mark.parametrize("case", sorted(CAUSES))
def test_message_and_snapshot_together_agree_within_the_rounding(case):
    d = diagnose(H200 / case / "oom-rank0.pickle")  # reads oom-rank0.txt beside it
    assert d.message is not None and d.verdict.cause == CAUSES[case]
    m, f = d.message, d.facts
    for printed, exact in ((m.requested, f.requested), (m.allocated, f.allocated), (m.device_free, f.device_free)):
        assert abs(printed - exact) <= m.precision
    assert abs(m.reserved - f.reserved) <= 2 * m.precision  # printed as allocated + unallocated, both rounded


def test_budget_and_shortage_figures():
    budget = diagnose(H200 / "budget" / "oom-rank0.pickle")
    assert budget.facts.allowed == 16 * GiB  # dump_on_oom's observer gets the allowed memory from the allocator
    assert budget.facts.allocated + budget.facts.requested == 17 * GiB
    shortage = diagnose(H200 / "shortage" / "oom-rank0.pickle")
    assert shortage.facts.allowed is None and shortage.facts.unallocated == 0
    assert shortage.facts.device_free < shortage.facts.requested


def test_other_processes_names_the_holder():
    d = diagnose(H200 / "other" / "oom-rank0.txt")
    holder = json.loads((H200 / "other" / "holder.ready").read_text())
    assert [pid for pid, _ in d.facts.processes] == [holder["pid"]]
    # NVML's figure for the holder covers the tensor it held
    assert d.facts.processes[0][1] >= holder["held_bytes"]


def test_fragmentation_replay_names_the_setting_the_gpu_confirmed():
    d = diagnose(H200 / "frag" / "oom-rank0.pickle")
    assert d.replay.confidence == "high" and d.replay.reproduced
    assert d.recommended_conf == "expandable_segments:True"
    for run in ("confirm-expandable", "confirm-recommended"):  # run 2 took the setting from diagnose's answer
        confirmed = result(run)
        assert confirmed["alloc_conf"] == d.recommended_conf and confirmed["oom"] is False
        assert d.recommended_peak_reserved == confirmed["stats"]["reserved_bytes.all.peak"]
    largest = max(p.largest_free for p in d.snapshot.pools)
    assert largest < d.facts.requested <= d.facts.unallocated


def test_the_recommended_setting_is_looked_up_in_the_table_for_the_snapshots_torch():
    d = diagnose(H200 / "frag" / "oom-rank0.pickle")
    assert (d.checked_conf, d.torch_version) == (d.recommended_conf, "2.11.0+cu130")
    ids = [p.id for p in d.known_problems + list(d.problems.hidden)]   # those shown, then those counted
    # the problems of expandable segments that depend on what the job does; 2.9's unread variable is not 2.11's
    assert "expandable-cuda-ipc-pidfd" in ids and "expandable-cudagraph-nccl-hang" in ids
    assert "alloc-conf-unread-2.9" not in ids and all(p.when for p in d.known_problems + list(d.problems.hidden))
    step = d.next_steps[1]
    assert "on torch 2.11.0+cu130" in step and "https://github.com/pytorch/pytorch/issues/165685" in step
    assert "if the job sent or received CUDA tensors between processes" in step
    # from the message alone: the verdict's suggestion, on the torch releases its layout names (2.2 and later)
    m = diagnose(H200 / "frag" / "oom-rank0.txt")
    assert (m.checked_conf, m.torch_version) == ("expandable_segments:True", None)
    assert "alloc-conf-unread-2.9" in [p.id for p in m.problems.hidden] and "torch from 2.2" in m.next_steps[1]
    # nothing recommended, nothing looked up
    assert diagnose(H200 / "shortage" / "oom-rank0.txt").to_json()["known_problems"] is None


def test_a_mid_run_trace_is_rebuilt_to_the_state_the_whole_trace_shows():
    whole = read_snapshot(H200 / "frag" / "oom-rank0.pickle")
    window = read_snapshot(H200 / "frag-window" / "oom-rank0.pickle")
    events = whole["device_traces"][0]
    kept = len(window["device_traces"][0])
    assert kept == window["alloctune"]["max_entries"] < len(events)
    # blocks live when the window starts, by the whole trace of the same program
    live: dict[int, int] = {}
    for e in events[:len(events) - kept]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    recon = reconstruct(window, 0, window["alloctune"]["oom"]["requested_bytes"], 0)
    assert not recon.whole_run
    assert (recon.start_live_blocks, recon.start_live_bytes) == (len(live), sum(live.values()))
    d = diagnose(H200 / "frag-window" / "oom-rank0.pickle")
    assert d.replay.reproduced and d.replay.confidence == "medium"
    assert d.recommended_conf == diagnose(H200 / "frag" / "oom-rank0.pickle").recommended_conf


def test_dump_on_oom_files_hold_plain_data_and_the_observer_figures():
    for case in CAUSES:
        snap = read_snapshot(H200 / case / "oom-rank0.pickle")
        oom = snap["alloctune"]["oom"]
        assert oom["rank"] == 0 and oom["device"] == 0
        assert oom["requested_bytes"] == snap["device_traces"][0][-1]["size"]
        assert snap["device_traces"][0][-1]["action"] == "oom"


def test_cli_on_a_snapshot(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "alloctune", "diagnose", str(H200 / "frag" / "oom-rank0.pickle")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    out, read = run.stdout, " ".join(run.stdout.split())   # read: as a person reads it, whatever the wrapping
    assert "Verdict (fragmentation)" in read and "Fragmentation picture" in read and "confidence high" in read
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True would have avoided this OOM" in read
    assert ("before using expandable_segments:True, check the job against its known problems on torch 2.11.0+cu130"
            in read)
    assert max(len(line) for line in out.splitlines()) <= 100
    as_json = subprocess.run([sys.executable, "-m", "alloctune", "diagnose", "--json",
                              str(H200 / "frag" / "oom-rank0.pickle")], capture_output=True, text=True, env=env,
                             timeout=120)
    known = json.loads(as_json.stdout)["known_problems"]
    assert known["conf"] == "expandable_segments:True" and known["torch_version"] == "2.11.0+cu130"
    ipc = next(p for p in known["problems"] if p["id"] == "expandable-cuda-ipc-pidfd")
    assert ipc == {"id": "expandable-cuda-ipc-pidfd", "severity": "broken", "when": ["cuda_ipc"],
                   "versions": "every version", "source": "https://github.com/pytorch/pytorch/issues/165685"}
    hostile = tmp_path / "oom-rank0.pickle"
    hostile.write_bytes(pickle.dumps({"device_traces": [], "segments": [], "x": print}, protocol=4))
    refused = subprocess.run([sys.executable, "-m", "alloctune", "diagnose", str(hostile)], capture_output=True,
                             text=True, env=env, timeout=120)
    assert refused.returncode == 2 and "refused" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_a_snapshot_without_an_oom_gives_the_fragmentation_picture_only(tmp_path):
    snap = read_snapshot(H200 / "frag" / "oom-rank0.pickle")
    del snap["alloctune"]  # as torch.cuda.memory._dump_snapshot writes it, before any OOM
    snap["device_traces"][0] = [e for e in snap["device_traces"][0] if e["action"] != "oom"]
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    d = diagnose(path)
    assert d.verdict is None and d.replay is None and "no OOM" in d.warnings[0]
    (pool,) = d.snapshot.pools
    assert (pool.segments, pool.free_blocks, pool.largest_free) == (4, 20, 100 * MiB)
